package recoverer_test

import (
	"context"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// Example asks a recoverer for a retry plan of an idempotent call whose
// result was a failure. Asking twice returns the same plan: it is issued
// (KV create in jw_plans, one message on jw.plans.<session>) exactly once.
func Example() {
	ctx := context.Background()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	topo := srv.Topology

	// A tool worker recorded a failed call and released the session.
	lease, _ := topo.Leases().AcquireLease(ctx, "s-1", "worker-a")
	lg, _ := topo.Logs().OpenLog(ctx, "s-1", "worker-a", lease.Epoch)
	op := &schema.Operation{Task: "t-1", Key: "op-7", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}}
	_, _ = lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: []byte(`{"sku":"A","qty":1}`), StartMarker: true, Operation: op}})
	_, _ = lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}})
	_, _ = lg.Append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Error: "connection reset"}})
	_ = lease.Release(ctx)

	// The recoverer (normally running Run, which also serves jw.api.*).
	// Its plans are signed with its own key, which tool workers trust.
	planner, _ := nkeys.CreateUser()
	rec, err := recoverer.New(recoverer.Config{Topology: topo, PlannerKey: planner})
	if err != nil {
		panic(err)
	}
	a, _ := rec.Inspect(ctx, "s-1", "c-1")
	fmt.Println(a.Outcome, a.Evidence, a.Decision)
	p1, _ := rec.Prepare(ctx, "s-1", "c-1")
	p2, _ := rec.Prepare(ctx, "s-1", "c-1")
	fmt.Println(p1.Basis, p1.Key, p1.PlanID == p2.PlanID)
	info, _ := topo.PlanLog.Info(ctx)
	fmt.Println("plans published:", info.State.Msgs)
	// Output:
	// uncertain failed retry_allowed
	// uncertain_safe op-7 true
	// plans published: 1
}
