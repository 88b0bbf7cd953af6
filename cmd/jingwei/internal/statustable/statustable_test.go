package statustable

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// TestPrintApprovalsAndReviews shows the calls awaiting approval, the
// stopped tasks and one call's reviews with where each came from and how
// it is judged.
func TestPrintApprovalsAndReviews(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	v := View{Status: service.Status{
		AwaitingApproval: []service.WaitingApproval{{Session: "s-1", CallID: "c-wait", Tool: "payments.charge", Deadline: at, Seq: 4}},
		StoppedTasks:     []service.StoppedTask{{Session: "s-1", Task: "t-9", By: "host", At: at}},
		Reviews: []service.ReviewCheck{
			{Seq: 1, Review: schema.Review{CallID: "c-r", Verdict: schema.VerdictNotExecuted, Operator: "alice"}, Accepted: true, Decides: true},
			{Seq: 2, Review: schema.Review{CallID: "c-r", Verdict: schema.VerdictUncertain, Probe: "ledger"}, Accepted: true},
			{Seq: 3, Review: schema.Review{CallID: "c-r", Verdict: schema.VerdictCompleted, Operator: "mallory"}, Code: "invalid_review"},
		},
	}}
	var b bytes.Buffer
	Print(&b, v)
	out := b.String()
	for _, want := range []string{
		"AWAITING APPROVAL (1)", "c-wait", "2026-12-01T10:00:00Z",
		"STOPPED TASKS (1)", "t-9",
		"REVIEWS OF c-r (3)", "person alice", "decides", "probe ledger", "evidence only", "ignored: invalid_review",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "recovery worker:") {
		t.Errorf("stats shown without any:\n%s", out)
	}
}
