package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// Example runs a tool through the canonical runtime on an embedded server,
// lets a call fail, and retries it under a single-use plan that reuses its
// operation key.
func Example() {
	ctx := context.Background()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	topo := srv.Topology

	// A tool that fails the first time it sees an operation key.
	seen := map[string]bool{}
	reg, _ := worker.NewRegistry(worker.Tool{
		Metadata:    effect.Metadata{Name: "greet"}.WithEffect(effect.Idempotent, "greet-v1"),
		InputSchema: json.RawMessage(`{"type":"object","required":["name"]}`),
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			if !seen[req.Operation.Key] {
				seen[req.Operation.Key] = true
				return nil, worker.Retryable(errors.New("upstream hiccup"))
			}
			return json.RawMessage(`"hello"`), nil
		},
	})

	const session = "s-example"
	lease, _ := topo.Leases().AcquireLease(ctx, session, "host")
	log, _ := topo.Logs().OpenLog(ctx, session, "host", lease.Epoch)
	plans := stream.NewPlans(topo.PlanBucket)
	// The recovery worker's plan-signing key; the runtime trusts its plans.
	planner, _ := nkeys.CreateUser()
	pub, _ := planner.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)
	rt, err := worker.New(worker.Config{
		Session: session, Log: log, Registry: reg, Plans: plans, Budget: stream.NewBudget(topo.Budget),
		TrustedPlanners: trusted,
	})
	if err != nil {
		panic(err)
	}

	args := json.RawMessage(`{"name":"ada"}`)
	first, err := rt.Call(ctx, "greet", args)
	fmt.Println("first:", first.Status, schema.CodeOf(err))

	// The host inspects the history, prepares a plan and issues it.
	history, _ := topo.Logs().Load(ctx, session)
	plan, _ := recovery.PrepareRetry(schema.Events(history), first.CallID, nil)
	plan, _ = recovery.SignPlan(planner, plan)
	_, _ = plans.Issue(ctx, plan)
	fmt.Println("basis:", plan.Basis)

	retry, err := rt.CallWithOptions(ctx, "greet", args, worker.CallOptions{Retry: &plan})
	fmt.Println("retry:", retry.Status, string(retry.Output), "same key:", retry.Operation.Key == first.Operation.Key)

	_, err = rt.CallWithOptions(ctx, "greet", args, worker.CallOptions{Retry: &plan})
	fmt.Println("replay:", schema.CodeOf(err))
	// Output:
	// first: failed failed
	// basis: uncertain_safe
	// retry: ok "hello" same key: true
	// replay: plan_consumed
}
