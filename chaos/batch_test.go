package chaos

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

// TestReadSnapshotAssessmentBatches: assessment messages as the recovery
// worker stores them — a batch of a session's assessments with one
// Jw-Assessment-Id value per member, a single one, and a batch repeating a
// member (a redelivery after a crash) — are read member by member, each
// with its own id: every finished call counts as assessed, the repeat is
// reported once, and a batch whose header does not name its members, or
// an array the strict decoder refuses (mixed sessions), is counted
// undecodable, not lost.
func TestReadSnapshotAssessmentBatches(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := topo.JS
	const s = "cxB-s1"
	lease, err := topo.Leases().AcquireLease(ctx, s, "w-1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := topo.Logs().Fence(ctx, s, "w-1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	contract := effect.Contract{Effect: effect.Idempotent, Revision: tools.OrdersRevision}
	assessment := func(session, id string) schema.Assessment {
		return schema.Assessment{Session: session, CallID: id, Tool: tools.OrdersCreate, Task: task, Key: "op-" + id, Contract: contract,
			Outcome: schema.OutcomeCompleted, Evidence: "ok", Decision: schema.DecisionRefuse, Attempts: 1, Chain: []string{id}}
	}
	var calls []schema.Assessment
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		call := &schema.Call{CallID: id, Tool: tools.OrdersCreate, Arguments: json.RawMessage(`{}`), StartMarker: true,
			Operation: &schema.Operation{Task: task, Key: "op-" + id, Contract: contract}}
		for _, ev := range []schema.Event{{Type: schema.TypeCall, Call: call}, {Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}}} {
			if _, err := log.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		calls = append(calls, assessment(s, id))
	}
	idOf := func(a schema.Assessment) string { return a.ID() }
	publish := func(as []schema.Assessment, ids ...string) {
		t.Helper()
		data, err := schema.EncodeAssessments(as)
		if err != nil {
			// A batch the encoder refuses (mixed sessions): written by
			// hand, as a broken writer would.
			data = []byte("[")
			for i, a := range as {
				b, _ := schema.EncodeAssessment(&a)
				if i > 0 {
					data = append(data, ',')
				}
				data = append(data, b...)
			}
			data = append(data, ']')
		}
		if ids == nil {
			for _, a := range as {
				ids = append(ids, idOf(a))
			}
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: topo.Names().AssessmentsSubject(s), Data: data, Header: nats.Header{headerAssessmentID: ids}}); err != nil {
			t.Fatal(err)
		}
	}
	publish(calls[:3])                                                 // a batch of three
	publish(calls[3:])                                                 // a single one
	publish(calls[1:3])                                                // a batch repeating two (a redelivery)
	publish(calls[:2], idOf(calls[0]))                                 // a batch whose header names one member only
	publish([]schema.Assessment{calls[0], assessment("cxB-s2", "x9")}) // mixed sessions

	snap, err := readSnapshot(ctx, js, "cxB", "cxB")
	if err != nil {
		t.Fatal(err)
	}
	if n := snap.Undecodable[streamAssessments]; n != 1 {
		t.Errorf("undecodable assessment messages %d, want 1 (the mixed-session batch)", n)
	}
	// 3 + 1 + 2 + 2 + 2 (the loose read of the refused batch).
	if len(snap.Assessments) != 10 {
		t.Fatalf("%d assessments read, want 10: %+v", len(snap.Assessments), snap.Assessments)
	}
	for i, want := range []string{"c1", "c2", "c3", "c4", "c2", "c3"} {
		a := snap.Assessments[i]
		if a.Assessment.CallID != want || a.ID != idOf(a.Assessment) {
			t.Errorf("assessment %d: %s with id %q, want %s with its own id", i, a.Assessment.CallID, a.ID, want)
		}
	}
	if a := snap.Assessments[6]; a.ID != "" {
		t.Errorf("a member of a batch whose header does not name each member got id %q, want none (counted by its fields)", a.ID)
	}
	x := newIndex(snap)
	for _, c := range calls {
		if len(x.assessed[callKey{s, c.CallID}]) == 0 {
			t.Errorf("%s/%s not assessed", s, c.CallID)
		}
	}
	rows, _ := check(&facts{Bound: 3 * time.Second, BoundText: "<= TTL+1s (3s)"}, snap)
	if r := rowOf(t, rows, rowClosedUnassessed); r.Value != 0 {
		t.Errorf("closed unassessed %+v, want none: every batch member counts", r)
	}
	// c1 ×4 (batch, the header-less batch, the mixed batch… ), c2 ×3, c3 ×2:
	// every member beyond the first of its id is a repeat.
	if r := rowOf(t, rows, rowRepeated); r.Value != 10-4-1 {
		t.Errorf("repeated %+v, want %d", r, 10-4-1)
	}
}
