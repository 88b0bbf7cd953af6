package recoverer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestAwaitingReviewNotHiddenByUnsignedRecords: after a recovery-worker
// restart, "awaiting review" is rebuilt from durable state. Assessments
// carry no signature, and jw_plans takes writes from the worker role, so
// a forged assessment from the recoverer credential (one message, or a
// batch of 3,000) saying a call needs no review, or any record under the
// call's plan id in jw_plans, made calls that await review vanish from
// status. The rebuild must follow the log (and signed plans) only: every
// call still awaits review after a restart, under its old name and a new
// one.
func TestAwaitingReviewNotHiddenByUnsignedRecords(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	e := setup(t, ttl)
	first := e.recoverer("a")
	stop := e.run(first)
	started(t, first)

	w := e.writer("s-f", "w-f")
	w.renew(t, ttl/4)
	var want []string
	for _, id := range []string{"pay-1", "pay-2", "pay-3"} {
		w.call(id, "payments.charge", effect.NonIdempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusFailed, "")
		want = append(want, "s-f/"+id)
	}
	streamtest.Eventually(t, 5*time.Second, "pay-1..3 await review", func() bool {
		got := keysOf(statusView(t, first).AwaitingReview)
		sort.Strings(got)
		return reflect.DeepEqual(got, want)
	})
	stop()

	// As the recoverer role may: pay-1 assessed as needing no review.
	forged := func(callID string, d schema.Decision) schema.Assessment {
		return schema.Assessment{Session: "s-f", CallID: callID, Tool: "payments.charge", Task: "t-1", Key: "k-" + callID,
			Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "v1"}, Outcome: schema.OutcomeCompleted, Evidence: "ok",
			Decision: d, Attempts: 1, Chain: []string{callID}}
	}
	one := forged("pay-1", schema.DecisionRefuse)
	b, err := schema.EncodeAssessment(&one)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(b []byte, as []schema.Assessment) {
		t.Helper()
		msg := nats.NewMsg(e.topo.Names().AssessmentsSubject("s-f"))
		msg.Data = b
		if len(as) == 1 {
			msg.Header.Add(HeaderAssessmentID, as[0].ID())
		} // 3,000 ids exceed the server's header limit: a batch without them
		if _, err := e.topo.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(b, []schema.Assessment{one})
	// A batch of 3,000: pay-2 among calls that never were.
	batch := []schema.Assessment{forged("pay-2", schema.DecisionRefuse)}
	for i := range 2999 {
		batch = append(batch, forged(fmt.Sprintf("ghost-%d", i), schema.DecisionRefuse))
	}
	if b, err = schema.EncodeAssessments(batch); err != nil {
		t.Fatal(err)
	}
	publish(b, batch)
	// As the worker role may: a record under pay-3's plan id in jw_plans,
	// its plan unsigned.
	rec, _ := json.Marshal(map[string]any{"state": "consumed", "consumed_by": "x",
		"plan": map[string]any{"v": 1, "plan_id": recovery.PlanID("s-f", "pay-3"), "session": "s-f", "prior_call_id": "pay-3"}})
	if _, err := e.topo.PlanBucket.Put(ctx, recovery.PlanID("s-f", "pay-3"), rec); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"a", "fresh"} {
		next := e.recoverer(name)
		stopNext := e.run(next)
		started(t, next)
		got := keysOf(statusView(t, next).AwaitingReview)
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("HOLE: %s: awaiting review after restart %v, want %v (unsigned records hid calls)", name, got, want)
		}
		stopNext()
	}
}

// TestRepairPublishesOnlySignedPlans: at start the recovery worker
// publishes the issued plans a crash left unpublished; a record the worker
// role wrote in jw_plans in state issued, with a plan no trusted planner
// signed, was published on jw.plans.<session> like a real one, and
// counted by status. It must not be: only plans a trusted planner signed
// are published or counted.
func TestRepairPublishesOnlySignedPlans(t *testing.T) {
	ctx := context.Background()
	e := setup(t, time.Second)
	id := recovery.PlanID("s-u", "pay-1")
	rec, _ := json.Marshal(map[string]any{"state": "issued",
		"plan": map[string]any{"v": 1, "plan_id": id, "session": "s-u", "prior_call_id": "pay-1", "prior_seq": 1, "tool": "payments.charge",
			"task": "t-1", "key": "k-1", "basis": "reviewed_not_executed"}})
	if _, err := e.topo.PlanBucket.Put(ctx, id, rec); err != nil {
		t.Fatal(err)
	}
	r := e.recoverer("a")
	stop := e.run(r)
	defer stop()
	started(t, r)
	if n := len(e.planMsgs()); n != 0 {
		t.Fatalf("HOLE: %d plan messages published at start for an unsigned jw_plans record", n)
	}
	if st := statusView(t, r); st.Plans.Issued != 0 {
		t.Fatalf("status counts %d issued plans for an unsigned jw_plans record", st.Plans.Issued)
	}
}
