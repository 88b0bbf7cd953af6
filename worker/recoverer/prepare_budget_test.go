package recoverer

import (
	"context"
	"fmt"
	"testing"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestPrepareRequestBudget pins the requests one prepare sends on each
// path (issue 16), counted by a tap on the JetStream API, the KV and the
// plan subjects — what the contract needs and nothing else:
//
//   - issued (no plan stored): the latest review (the JW_REVIEWS leader's
//     message get), the KV get, the history (the JW_EVENTS leader's last
//     message and a batched direct get), the KV create, the publication;
//   - lost the create (the KV get did not show the plan yet): the same but
//     the KV get, then the winner's record (KV get) and the publication
//     with its plan id as Msg-Id (a duplicate);
//   - asked again moments later: the review, the KV get, the publication
//     with its plan id as Msg-Id (a duplicate, whose sequence is checked)
//     and the plan consumer's ack floor (consumer info).
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
	tap := tapRequests(t, srv, topo)
	ev, rv, kv := topo.StreamName("EVENTS"), topo.StreamName("REVIEWS"), topo.Prefix+"_plans"
	publish := requestKind(topo.PlansSubject("x"), topo.PlansSubject("x")[:len(topo.PlansSubject("x"))-1])
	check := func(path string, want map[string]int, f func() error) {
		t.Helper()
		tap.reset()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got := tap.reset()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: requests %v, want %v", path, got, want)
		}
	}
	check("issued", map[string]int{
		"STREAM.MSG.GET " + rv:                  1,
		"DIRECT.GET KV_" + kv + " (by subject)": 1,
		"STREAM.MSG.GET " + ev:                  1,
		"DIRECT.GET " + ev:                      1,
		"publish $KV." + kv + " (create)":       1,
		publish:                                 1,
	}, func() error { _, err := recs[0].Prepare(ctx, sessions[0], "c-1"); return err })
	check("asked again", map[string]int{
		"STREAM.MSG.GET " + rv:                      1,
		"DIRECT.GET KV_" + kv + " (by subject)":     1,
		publish:                                     1,
		"CONSUMER.INFO " + topo.StreamName("PLANS"): 1,
	}, func() error { _, err := recs[1].Prepare(ctx, sessions[0], "c-1"); return err })

	// A loser: its KV get does not show the plan (a replica behind, or a
	// create landing just after the get).
	if _, err := recs[0].Prepare(ctx, sessions[1], "c-1"); err != nil {
		t.Fatal(err)
	}
	lag := &laggingKV{KeyValue: recs[1].t.Plans}
	lag.misses.Store(1)
	recs[1].issuer.plans = stream.NewPlans(lag)
	check("lost the create", map[string]int{
		"STREAM.MSG.GET " + rv:                  1,
		"DIRECT.GET KV_" + kv + " (by subject)": 1,
		"STREAM.MSG.GET " + ev:                  1,
		"DIRECT.GET " + ev:                      1,
		"publish $KV." + kv + " (create)":       1,
		publish:                                 1,
	}, func() error { _, err := recs[1].Prepare(ctx, sessions[1], "c-1"); return err })
}
