package answer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// waiting is a history with call c-1 waiting for approval (seq 2).
func waiting() []schema.Event {
	return []schema.Event{
		{Seq: 1, Session: "s-1", Type: "tool.call", Call: &schema.Call{CallID: "c-1", Tool: "payments.charge", Operation: &schema.Operation{Task: "t-1", Key: "k"}}},
		{Seq: 2, Session: "s-1", Type: schema.TypeApprovalRequested, ApprovalRequest: &schema.ApprovalRequest{CallID: "c-1", Deadline: time.Now().Add(time.Minute)}},
	}
}

func TestStateOf(t *testing.T) {
	granted := append(waiting(), schema.Event{Seq: 3, Type: schema.TypeApprovalGranted, Approval: &schema.Approval{CallID: "c-1", Decision: schema.Approved}})
	rejected := append(waiting(), schema.Event{Seq: 4, Type: "tool.result", Result: &schema.Result{CallID: "c-1", Status: schema.StatusRejected, Stage: schema.StageApproval}})
	for _, tc := range []struct {
		name  string
		h     []schema.Event
		call  string
		state State
		seq   uint64
	}{
		{"waiting", waiting(), "c-1", Waiting, 2},
		{"granted", granted, "c-1", Granted, 3},
		{"rejected", rejected, "c-1", Rejected, 4},
		{"other call", waiting(), "c-2", Other, 0},
		{"empty", nil, "c-1", Other, 0},
	} {
		st, seq := StateOf(tc.h, tc.call)
		if st != tc.state || seq != tc.seq {
			t.Errorf("%s: StateOf = %v, %d; want %v, %d", tc.name, st, seq, tc.state, tc.seq)
		}
	}
}

func TestNotWaitingSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		st   State
		h    []schema.Event
		want string
	}{
		{Other, nil, "no events on the log"},
		{Granted, waiting(), "approved already (approval.granted at seq 7)"},
		{Rejected, waiting(), "rejected at stage approval (denied or timed out, seq 7)"},
		{Other, waiting(), "never asked for approval"},
	} {
		err := NotWaiting("s-1", "c-1", tc.st, 7, tc.h)
		var e *schema.Error
		if !errors.As(err, &e) || e.Code != schema.CodeNotWaiting || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("state %v: %v, want not_waiting saying %q", tc.st, err, tc.want)
		}
	}
}

// TestAwait follows a history that moves on under Await: an approval
// counts once granted; a denial of a call still waiting after the wait is
// invalid_approval; a call granted while it was denied is not_waiting.
func TestAwait(t *testing.T) {
	granted := append(waiting(), schema.Event{Seq: 3, Type: schema.TypeApprovalGranted, Approval: &schema.Approval{CallID: "c-1", Decision: schema.Approved}})
	reads := 0
	load := func(context.Context, string) ([]schema.Event, error) {
		if reads++; reads < 2 {
			return waiting(), nil
		}
		return granted, nil
	}
	a := schema.Approval{Session: "s-1", CallID: "c-1", Decision: schema.Approved, Signer: "UX"}
	out, err := Await(context.Background(), load, a, 5*time.Second, "")
	if err != nil || out.Outcome != "accepted" || out.Seq != 3 {
		t.Fatalf("Await = %+v, %v; want accepted at seq 3", out, err)
	}
	a.Decision = schema.Denied
	if _, err := Await(context.Background(), load, a, time.Second, ""); schema.CodeOf(err) != schema.CodeNotWaiting {
		t.Errorf("denial of a granted call: %v, want not_waiting", err)
	}
	still := func(context.Context, string) ([]schema.Event, error) { return waiting(), nil }
	if _, err := Await(context.Background(), still, a, 0, ""); schema.CodeOf(err) != schema.CodeInvalidApproval {
		t.Errorf("call still waiting: %v, want invalid_approval", err)
	}
}
