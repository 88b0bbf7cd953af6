package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// TestClientUsage checks the usage errors of the client commands: they are
// found before anything connects (no server runs here), exit 2 and print
// nothing on stdout.
func TestClientUsage(t *testing.T) {
	key := writeFile(t, "k.nk", "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QKDU37FDXNJ4SHBVHV7ROXTI\n")
	tests := []struct {
		name string
		args []string
	}{
		{"call without session", []string{"call", "--tool", "orders.create"}},
		{"call bad session", []string{"call", "--session", "a.b", "--tool", "orders.create"}},
		{"call without tool", []string{"call", "--session", "s-1"}},
		{"call args not JSON", []string{"call", "--session", "s-1", "--tool", "t", "--args", "{"}},
		{"call args not an object", []string{"call", "--session", "s-1", "--tool", "t", "--args", "[1]"}},
		{"call bad log format", []string{"call", "--session", "s-1", "--tool", "t", "--log-format", "xml"}},
		{"call stray argument", []string{"call", "--session", "s-1", "--tool", "t", "extra"}},
		{"retry without call", []string{"retry", "--session", "s-1"}},
		{"retry bad session", []string{"retry", "--session", "", "--call", "c-1"}},
		{"review bad verdict", []string{"review", "--session", "s-1", "--call", "c-1", "--verdict", "done", "--evidence", "e", "--operator", "o", "--key", key}},
		{"review without evidence", []string{"review", "--session", "s-1", "--call", "c-1", "--verdict", "completed", "--operator", "o", "--key", key}},
		{"review blank operator", []string{"review", "--session", "s-1", "--call", "c-1", "--verdict", "completed", "--evidence", "e", "--operator", "  ", "--key", key}},
		{"review without key", []string{"review", "--session", "s-1", "--call", "c-1", "--verdict", "completed", "--evidence", "e", "--operator", "o"}},
		{"review bad key file", []string{"review", "--session", "s-1", "--call", "c-1", "--verdict", "completed", "--evidence", "e", "--operator", "o", "--key", writeFile(t, "bad.nk", "x")}},
		{"status bad session", []string{"status", "--session", "a b"}},
		{"status bad interval", []string{"status", "--watch", "--interval", "0s"}},
		{"demo short lease", []string{"demo", "--lease-ttl", "100ms"}},
		{"demo worker bad hold", []string{"demo", "worker", "--hold", "orders.create=sometimes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, out, errOut := runCLI(tt.args...)
			if st != exitUsage || out != "" || errOut == "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, a message on stderr only", st, out, errOut)
			}
		})
	}
}

// TestReviewFieldTooLong: an operator over 1,024 bytes is refused with
// field_too_long before anything connects.
func TestReviewFieldTooLong(t *testing.T) {
	key := writeFile(t, "k.nk", "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QKDU37FDXNJ4SHBVHV7ROXTI\n")
	st, out, _ := runCLI("review", "--session", "s-1", "--call", "c-1", "--verdict", "completed", "--evidence", "e", "--operator", strings.Repeat("o", schema.MaxFieldBytes+1), "--key", key)
	if st != exitRefused || !strings.Contains(out, `"code":"field_too_long"`) {
		t.Fatalf("exit %d, stdout %q; want 3 field_too_long", st, out)
	}
}

func TestDecodeServiceError(t *testing.T) {
	body := func(code, msg, latest string) []byte {
		b, _ := json.Marshal(schema.ErrorBody{Error: schema.ErrorDetail{Code: schema.Code(code), Message: msg, Latest: latest}})
		return b
	}
	tests := []struct {
		name   string
		msg    *nats.Msg
		want   *schema.Error
		status int
	}{
		{"ok answer", &nats.Msg{Data: []byte(`{"session":"s-1"}`)}, nil, 0},
		{"error body", &nats.Msg{Data: body("needs_review", "review first", "")}, &schema.Error{Code: "needs_review", Message: "review first"}, exitRefused},
		{"superseded with latest", &nats.Msg{Data: body("superseded_call", "later attempt", "c-2")}, &schema.Error{Code: "superseded_call", Message: "later attempt", Latest: "c-2"}, exitRefused},
		{"internal", &nats.Msg{Data: body("internal", "disk full", "")}, &schema.Error{Code: "internal", Message: "disk full"}, exitFailure},
		{"headers only", &nats.Msg{Data: nil, Header: nats.Header{micro.ErrorHeader: {"bad_request: boom"}, micro.ErrorCodeHeader: {"400"}}}, &schema.Error{Code: "bad_request", Message: "boom"}, exitRefused},
		{"header without code", &nats.Msg{Header: nats.Header{micro.ErrorHeader: {"boom"}}}, &schema.Error{Code: "internal", Message: "boom"}, exitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := service.AnswerError(tt.msg)
			if (got == nil) != (tt.want == nil) || got != nil && (got.Code != tt.want.Code || got.Message != tt.want.Message || got.Latest != tt.want.Latest) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got == nil {
				return
			}
			var out bytes.Buffer
			if st := printError(&out, got); st != tt.status {
				t.Fatalf("printError exit %d, want %d", st, tt.status)
			}
			var printed schema.ErrorBody
			if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed.Error.Code != tt.want.Code || printed.Error.Latest != tt.want.Latest || printed.Error.Message != tt.want.Message {
				t.Fatalf("printed %q (%v)", out.String(), err)
			}
		})
	}
	var out bytes.Buffer
	if st := printError(&out, errors.New("no route")); st != exitFailure || !strings.Contains(out.String(), `"code":"internal"`) {
		t.Fatalf("plain error: exit %d, %q", st, out.String())
	}
}

func TestPrintStatus(t *testing.T) {
	c := effect.Contract{Effect: effect.NonIdempotent, Revision: "payments-v1"}
	v := statusView{
		Status: service.Status{
			OpenCalls:      []service.OpenCall{{Session: "s-1", CallID: "c-open", Tool: "orders.create", Task: "t-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Epoch: 1, Seq: 7, Started: true}},
			AwaitingReview: []schema.Assessment{{Session: "s-2", CallID: "c-review", Tool: "payments.charge", Contract: c, Outcome: schema.OutcomeUncertain, Evidence: "no_result", Decision: schema.DecisionNeedsReview, Attempts: 1}},
			Plans:          service.PlanCounts{Issued: 1, Consumed: 1},
		},
		Plans: []stream.PlanRecord{
			{State: stream.PlanIssued, Plan: schema.Plan{PlanID: "p-1", Session: "s-3", Tool: "orders.create", PriorCallID: "c-a", Basis: schema.BasisUncertainSafe}},
			{State: stream.PlanConsumed, ConsumedBy: "c-b2", Plan: schema.Plan{PlanID: "p-2", Session: "s-3", Tool: "orders.create", PriorCallID: "c-b", Basis: schema.BasisNotStarted}},
		},
	}
	var out bytes.Buffer
	printStatus(&out, v)
	text := out.String()
	for _, want := range []string{
		"OPEN CALLS (1)", "AWAITING REVIEW (1)", "PLANS (issued 1, consumed 1)",
		"c-open", "idempotent", "yes", "c-review", "non_idempotent", "no_result",
		"p-1", "issued", "p-2", "consumed", "c-b2",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	// Aligned: every row of a table starts its CALL column at the same
	// offset as the header.
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "SESSION") && i+1 < len(lines) {
			if strings.Index(l, "CALL") != strings.Index(lines[i+1], "c-") {
				t.Errorf("columns not aligned:\n%s\n%s", l, lines[i+1])
			}
		}
	}
}
