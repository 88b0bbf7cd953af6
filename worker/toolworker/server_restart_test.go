package toolworker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestWorkerSurvivesServerRestart: the server is stopped and started again
// on the same store and address under a live tool worker (its own gateway
// included). Without a process restart the worker takes its partitions
// back and runs a published request, and jw.api.call answers a new call
// with its stored result. (The recoverer's twin is
// recoverer.TestSurvivesServerRestart; no test restarted the server under a
// tool worker.)
func TestWorkerSurvivesServerRestart(t *testing.T) {
	ctx := context.Background()
	srv, nc, topo := streamtest.StartRestartable(t, stream.TopologyConfig{LeaseTTL: time.Second})
	p := newProbe()
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond, CallTimeout: 20 * time.Second})

	publish(t, topo, "s-a", "r-1", "echo", `{"n":1}`)
	streamtest.Eventually(t, 20*time.Second, "first request run", func() bool { return len(p.ran("s-a")) == 1 })

	srv.Restart()

	// A published request, on the session the worker owned before and on
	// a new one.
	streamtest.Eventually(t, 20*time.Second, "request published after the restart", func() bool {
		b, _ := json.Marshal(schema.Request{V: 1, RequestID: "r-2", Session: "s-a", Task: worker.DefaultTask, Tool: "echo", Arguments: json.RawMessage(`{"n":2}`)})
		_, err := topo.JS.Publish(ctx, topo.Names().RequestsSubject("s-a"), b, jetstream.WithMsgID(stream.RequestMsgID("s-a", "r-2")))
		return err == nil
	})
	publish(t, topo, "s-b", "r-3", "echo", `{"n":3}`)
	streamtest.Eventually(t, 45*time.Second, "requests run after the restart", func() bool {
		return len(p.ran("s-a")) == 2 && len(p.ran("s-b")) == 1
	})
	// jw.api.call through the worker's own gateway.
	cl := service.NewClient(nc, service.ClientConfig{Prefix: topo.Prefix, Timeout: 30 * time.Second})
	var ev schema.Event
	var err error
	streamtest.Eventually(t, 45*time.Second, "gateway answers after the restart", func() bool {
		ev, err = cl.Call(ctx, schema.Request{V: 1, RequestID: "r-4", Session: "s-c", Task: worker.DefaultTask, Tool: "echo", Arguments: json.RawMessage(`{"n":4}`)})
		return err == nil
	})
	if ev.Result == nil || ev.Result.Status != schema.StatusOK {
		t.Fatalf("call after the restart: %+v", ev)
	}
}

// TestPlanRunsAfterServerRestart: a call fails after its write, the server
// is stopped and started again on the same store under the live worker,
// and only then is the retry plan issued and published: the worker's plan
// consumer (and request consumer) came back with the connection, and the
// retry runs exactly once. (No test restarted the server under a tool
// worker's plan consumer.)
func TestPlanRunsAfterServerRestart(t *testing.T) {
	ctx := context.Background()
	srv, _, topo := streamtest.StartRestartable(t, stream.TopologyConfig{LeaseTTL: time.Second})
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	const s = "plan-restart"
	tl.FailAfterWrite(1)
	publish(t, topo, s, "r-1", tools.OrdersCreate, `{"sku":"A-1","qty":2}`)
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, tl.List()...), PollInterval: 50 * time.Millisecond, IdleTimeout: 200 * time.Millisecond, DisableGateway: true})
	streamtest.Eventually(t, 20*time.Second, "first attempt recorded", func() bool { return results(t, topo, s) == 1 })
	first := calls(t, topo, s)[0]

	srv.Restart()

	streamtest.Eventually(t, 30*time.Second, "session given back", func() bool {
		_, ok, err := topo.Leases().LeaseHolder(ctx, s)
		return err == nil && !ok
	})
	plan, err := recovery.PrepareRetry(schema.Events(history(t, topo, s)), first.CallID, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan = signPlan(t, plan)
	streamtest.Eventually(t, 20*time.Second, "plan issued", func() bool {
		_, err := stream.NewPlans(topo.PlanBucket).Issue(ctx, plan)
		return err == nil
	})
	pb, _ := json.Marshal(plan)
	if _, err := topo.JS.Publish(ctx, topo.Names().PlansSubject(s), pb, jetstream.WithMsgID(plan.PlanID)); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 45*time.Second, "retry recorded after the restart", func() bool { return results(t, topo, s) == 2 })
	cs := calls(t, topo, s)
	if len(cs) != 2 || cs[1].Operation.Retry == nil || cs[1].Operation.Retry.PlanID != plan.PlanID {
		t.Fatalf("calls %+v", cs)
	}
	if orders, err := tl.Orders(ctx); err != nil || len(orders) != 1 {
		t.Fatalf("orders %+v %v, want exactly one", orders, err)
	}
}
