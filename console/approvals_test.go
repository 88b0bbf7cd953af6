package console

import (
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// TestApprovalOf: a call's approval state follows its session log: it
// waits after approval.requested; approval.granted is the approval on
// record (and it no longer waits); a result rejected at stage approval is
// a denial on record; another call's events and a stop of another task
// change nothing, a stop of its task shows.
func TestApprovalOf(t *testing.T) {
	dl := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	call := func(id, task string) schema.Event {
		return schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "payments.charge", Operation: &schema.Operation{Task: task, Key: "k-" + id}}}
	}
	asked := func(seq uint64, id string) schema.Event {
		return schema.Event{Seq: seq, Type: schema.TypeApprovalRequested, ApprovalRequest: &schema.ApprovalRequest{CallID: id, Deadline: dl}}
	}
	h := []schema.Event{call("c-1", "t-1"), asked(2, "c-1"), call("c-2", "t-2"), asked(4, "c-2")}
	if st := approvalOf(h, "c-1"); !st.Asked || !st.Waiting || !st.Deadline.Equal(dl) || len(st.Records) != 0 || st.Stopped != nil {
		t.Fatalf("waiting call: %+v", st)
	}
	if st := approvalOf(h, "c-9"); st.Asked || st.Waiting {
		t.Fatalf("unknown call: %+v", st)
	}
	h = append(h,
		schema.Event{Seq: 5, Type: schema.TypeApprovalGranted, Approval: &schema.Approval{CallID: "c-1", Decision: schema.Approved, Approver: "carol"}},
		schema.Event{Seq: 6, Type: schema.TypeResult, Result: &schema.Result{CallID: "c-2", Status: schema.StatusRejected, Stage: schema.StageApproval, Error: "denied by carol"}},
		schema.Event{Seq: 7, Type: schema.TypeTaskStopped, Stop: &schema.Stop{Task: "t-2", By: schema.StoppedByHost}},
	)
	st := approvalOf(h, "c-1")
	if st.Waiting || len(st.Records) != 1 || !st.Records[0].Granted || st.Records[0].Approval.Approver != "carol" || st.Records[0].Seq != 5 || st.Stopped != nil {
		t.Fatalf("approved call: %+v", st)
	}
	st = approvalOf(h, "c-2")
	if st.Waiting || len(st.Records) != 1 || st.Records[0].Granted || st.Records[0].Why != "denied by carol" || st.Stopped == nil || st.Stopped.Task != "t-2" {
		t.Fatalf("denied call of a stopped task: %+v", st)
	}
}
