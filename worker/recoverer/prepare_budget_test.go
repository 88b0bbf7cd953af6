package recoverer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestPrepareRequestBudget pins the requests one prepare sends on each
// path, counted by a tap on the JetStream API, the KV and the
// plan subjects — what the contract needs and nothing else:
//
//   - issued (no plan stored): the latest review (the JW_REVIEWS leader's
//     message get), the KV get, the history (the JW_EVENTS leader's last
//     message and a batched direct get), the KV create, the publication;
//   - lost the create (the KV get did not show the plan yet): the same
//     (its get here served by a replica behind), then the winner's record
//     (KV get) instead of the first, and the publication with its plan id
//     as Msg-Id (a duplicate);
//   - asked again moments later: the review, the KV get, the publication
//     with its plan id as Msg-Id (a duplicate, whose sequence is checked)
//     and the plan consumer's ack floor (consumer info) — also when
//     another plan of the session was published after it (looking the
//     plan's latest message up would read the subject's last message,
//     then the subject);
//   - no stream info: the identity of the streams prepare decides from
//     was compared just before and no advisory of theirs came
//     in since (identityGuard.verify; TestIdentityComparedAfterAdvisory
//     holds the other case), so a prepare pays nothing for it.
//
// A change that adds a request to a path fails here; one that removes a
// request the contract needs fails the tests of that guarantee.
func TestPrepareRequestBudget(t *testing.T) {
	srv, _, topo := streamtest.StartWith(t, streamtest.Config{})
	ctx := context.Background()
	planner := newPlanner(t)
	recs := make([]*Recoverer, 2)
	for i, ti := range racerTopologies(t, srv, topo, 2) {
		var err error
		if recs[i], err = New(Config{Topology: ti, Name: fmt.Sprintf("r%d", i), DisableService: true, PlannerKey: planner}); err != nil {
			t.Fatal(err)
		}
	}
	sessions := fillUncertain(t, topo, "budget", 2)
	two := "budget-two" // a session with two plans
	lg, err := topo.Logs().OpenLog(ctx, two, "bench-writer", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c-1", "c-2"} {
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: "op-" + id, Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusFailed, Retryable: true, Error: "upstream 503"}},
		} {
			if _, err := lg.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range recs {
		if _, err := r.identity.check(ctx); err != nil { // what Run does at start
			t.Fatal(err)
		}
	}
	tap := tapRequests(t, srv, topo)
	var (
		review  = "STREAM.MSG.GET " + topo.Names().StreamName("REVIEWS")
		tail    = "STREAM.MSG.GET " + topo.Names().StreamName("EVENTS")
		batch   = "DIRECT.GET " + topo.Names().StreamName("EVENTS")
		kvGet   = "DIRECT.GET KV_" + topo.Prefix + "_plans (by subject)"
		create  = "publish $KV." + topo.Prefix + "_plans (create)"
		floor   = "CONSUMER.INFO " + topo.Names().StreamName("PLANS")
		publish = requestKind(topo.Names().PlansSubject("x"), strings.TrimSuffix(topo.Names().PlansSubject("x"), "x"))
	)
	check := func(path string, want map[string]int, f func() error) {
		t.Helper()
		for _, r := range recs { // compared just now, no advisory since
			r.identity.matched(time.Now(), r.identity.gen.Load())
		}
		tap.reset()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := tap.reset(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: requests %v, want %v", path, got, want)
		}
	}
	prepare := func(r *Recoverer, session, call string) func() error {
		return func() error { _, err := r.Prepare(ctx, session, call); return err }
	}
	check("issued", map[string]int{review: 1, kvGet: 1, tail: 1, batch: 1, create: 1, publish: 1}, prepare(recs[0], sessions[0], "c-1"))
	check("asked again", map[string]int{review: 1, kvGet: 1, publish: 1, floor: 1}, prepare(recs[1], sessions[0], "c-1"))

	for _, id := range []string{"c-1", "c-2"} {
		if err := prepare(recs[0], two, id)(); err != nil {
			t.Fatal(err)
		}
	}
	check("asked again, another plan last on the subject", map[string]int{review: 1, kvGet: 1, publish: 1, floor: 1}, prepare(recs[1], two, "c-1"))

	// A loser: its KV get does not show the plan (a replica behind, or a
	// create landing just after the get).
	if err := prepare(recs[0], sessions[1], "c-1")(); err != nil {
		t.Fatal(err)
	}
	lag := &laggingKV{KeyValue: recs[1].t.PlanBucket}
	lag.misses.Store(1)
	recs[1].issuer.plans = stream.NewPlans(lag)
	check("lost the create", map[string]int{review: 1, kvGet: 1, tail: 1, batch: 1, create: 1, publish: 1}, prepare(recs[1], sessions[1], "c-1"))
}
