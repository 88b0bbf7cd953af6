package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

var errCause = errors.New("cause")

func TestErrorMatching(t *testing.T) {
	mismatch := &schema.Error{Code: schema.CodePlanMismatch, Field: "task", Message: "plan p-1: task t-2", Err: errCause}
	wrapped := fmt.Errorf("run: %w", mismatch)
	switch {
	case !errors.Is(wrapped, schema.ErrPlanMismatch):
		t.Error("a plan_mismatch does not match its sentinel")
	case !errors.Is(wrapped, schema.ErrPlanRefused):
		t.Error("a plan_mismatch does not match the plan refusal group")
	case !errors.Is(wrapped, errCause):
		t.Error("the cause is not reachable")
	case errors.Is(wrapped, schema.ErrPlanConsumed):
		t.Error("a plan_mismatch matches plan_consumed")
	case errors.Is(&schema.Error{Code: schema.CodeRejected}, schema.ErrPlanRefused):
		t.Error("a rejection matches the plan refusal group")
	case errors.Is(schema.ErrPlanRefused, schema.ErrPlanMismatch):
		t.Error("the group sentinel matches one of its members")
	}
	if got := mismatch.Error(); got != "plan_mismatch (task): plan p-1: task t-2" {
		t.Errorf("Error() = %q", got)
	}
	if got := schema.TextOf(wrapped); got != "run: plan p-1: task t-2" {
		t.Errorf("TextOf = %q", got)
	}
	// The code word inside the wrapper's own text is left alone.
	e := fmt.Errorf("call completed twice: %w", schema.Errorf(schema.CodeCompleted, "completed at seq 4"))
	if got := schema.TextOf(e); got != "call completed twice: completed at seq 4" {
		t.Errorf("TextOf = %q", got)
	}
	if got := schema.TextOf(errors.New("plain")); got != "plain" {
		t.Errorf("TextOf(plain) = %q", got)
	}
}

func TestErrorBody(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want schema.ErrorDetail
	}{
		{"coded", schema.Errorf(schema.CodeNeedsReview, "review first"), schema.ErrorDetail{Code: schema.CodeNeedsReview, Message: "review first"}},
		{"superseded", &schema.Error{Code: schema.CodeSupersededCall, Message: "later attempt", Latest: "c-2"}, schema.ErrorDetail{Code: schema.CodeSupersededCall, Message: "later attempt", Latest: "c-2"}},
		{"rejected", fmt.Errorf("x: %w", &schema.Error{Code: schema.CodeRejected, Stage: schema.StageApproval, CallID: "c-1", Message: "denied"}), schema.ErrorDetail{Code: schema.CodeRejected, Message: "x: denied", Stage: schema.StageApproval, CallID: "c-1"}},
		{"plain", errors.New("disk full"), schema.ErrorDetail{Code: schema.CodeInternal, Message: "disk full"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := schema.EncodeError(tt.err)
			var body schema.ErrorBody
			if err := json.Unmarshal(b, &body); err != nil || body.Error != tt.want {
				t.Fatalf("encoded %s (%v), want %+v", b, err, tt.want)
			}
			e, ok := schema.DecodeErrorBody(b)
			if again := schema.EncodeError(e); string(again) != string(b) {
				t.Errorf("decoded and encoded again: %s, want %s", again, b)
			}
			if !ok || e.Code != tt.want.Code || e.Message != tt.want.Message || e.Latest != tt.want.Latest || e.Stage != tt.want.Stage {
				t.Fatalf("decoded %+v %v", e, ok)
			}
		})
	}
	for _, notBody := range []string{``, `{"session":"s-1"}`, `[1]`, `{"error":{"message":"no code"}}`, `{"error":"text"}`, `{"error":{"code":"a","code":"b"}}`} {
		if e, ok := schema.DecodeErrorBody([]byte(notBody)); ok {
			t.Errorf("%s decoded as an error body: %+v", notBody, e)
		}
	}
}
