package callreport

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

func TestResultError(t *testing.T) {
	ev := &schema.Event{Result: &schema.Result{CallID: "c-1", Status: schema.StatusRejected, Stage: schema.StageApproval, Error: "denied "}}
	e := ResultError(ev)
	if e.Code != schema.Code(schema.StatusRejected) || e.Message != "call c-1 ended rejected at stage approval: denied" {
		t.Errorf("ResultError = %+v", e)
	}
}

func TestWriteResult(t *testing.T) {
	var b bytes.Buffer
	WriteResult(&b, schema.Event{Session: "s-1", Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "boom"}}, "r-1", "orders.create")
	for _, want := range []string{"request  r-1", "status   failed (retryable)", "error    boom"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("result table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestWriteReview says what follows from the verdict, or why the call is
// not described.
func TestWriteReview(t *testing.T) {
	out := Review{Review: schema.Review{Session: "s-1", CallID: "c-1", Verdict: schema.VerdictNotExecuted}, Assessment: &schema.Assessment{}}
	var b bytes.Buffer
	WriteReview(&b, out, nil)
	if !strings.HasSuffix(b.String(), "a retry may now be prepared:\n  jingwei retry --session s-1 --call c-1\n") {
		t.Errorf("not_executed review:\n%s", b.String())
	}
	b.Reset()
	WriteReview(&b, out, errors.New("no service"))
	if !strings.HasSuffix(b.String(), "\nthe recovery worker did not describe the call: no service\n") {
		t.Errorf("undescribed call:\n%s", b.String())
	}
	out.Review.Verdict = schema.VerdictCompleted
	if got := ReviewNext(out.Review, schema.Assessment{}); !strings.Contains(got, "every retry of this call will be refused") {
		t.Errorf("completed: %q", got)
	}
}

func TestRetryHint(t *testing.T) {
	if got := RetryHint(string(schema.CodeNeedsReview), "s-1", "c-1"); !strings.Contains(got, "jingwei review --session s-1 --call c-1") {
		t.Errorf("needs_review hint: %q", got)
	}
	if got := RetryHint("bad_request", "s-1", "c-1"); got != "" {
		t.Errorf("no hint expected, got %q", got)
	}
}
