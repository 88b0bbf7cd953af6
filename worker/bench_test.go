package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// BenchmarkRuntimeCall measures calls per second through the runtime with a
// no-op tool against two baselines measured in the same run, in alternating
// batches of 100 so drift on a shared machine hits all of them alike:
//
//   - raw: three raw fenced appends per operation (Log.Append of a
//     tool.call, a tool.started and a tool.result of the same shape on a
//     session of its own). ratio = runtime calls/s ÷ raw ops/s; the
//     target is ≥ 0.85.
//   - same_writes: the same three appends plus one jw_budget count written
//     at once (Budget.Add), i.e. every durable write of a call whose count
//     cannot be deferred. ratio_same_writes = runtime ÷ that.
//
// The runtime's log is empty when it is opened, so it knows its history and
// defers the counts of its task, which has no limit (see the package
// documentation): jw_budget is written once per flush interval, not per
// call. BenchmarkRuntimeCallLimited measures a task with a limit, whose
// every count is written before the budget stage.
func BenchmarkRuntimeCall(b *testing.B) {
	for _, mode := range []natsnode.SyncMode{natsnode.SyncInterval, natsnode.SyncAlways} {
		b.Run("sync="+string(mode), func(b *testing.B) { benchRuntime(b, mode, 0) })
	}
}

// BenchmarkRuntimeCallLimited is BenchmarkRuntimeCall for a task with a
// (never reached) limit: the count is a compare-and-set alongside the
// tool.call append on every call, a fourth durable write, so ratio is
// expected near 3/4 and ratio_same_writes near 1.
func BenchmarkRuntimeCallLimited(b *testing.B) {
	for _, mode := range []natsnode.SyncMode{natsnode.SyncInterval, natsnode.SyncAlways} {
		b.Run("sync="+string(mode), func(b *testing.B) { benchRuntime(b, mode, 1<<40) })
	}
}

func benchRuntime(b *testing.B, mode natsnode.SyncMode, limit int64) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: mode})
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}

	// A session holds at most 100,000 events: every sessionOps operations
	// all three halves move to fresh sessions.
	const sessionOps = 20_000
	var (
		rt        *worker.Runtime
		raw, same *stream.Log
		gen       int
		inSess    int
	)
	open := func(name string) *stream.Log {
		lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("bench-%s-%d", name, gen), "bench", 1)
		if err != nil {
			b.Fatal(err)
		}
		return lg
	}
	next := func() {
		gen++
		inSess = 0
		lg := open("rt")
		if rt, err = worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: reg, Plans: plans, Budget: budget, BudgetLimit: limit}); err != nil {
			b.Fatal(err)
		}
		raw, same = open("raw"), open("same")
	}
	next()
	appends := func(lg *stream.Log, i int) {
		id := fmt.Sprintf("c-%032d", i)
		evs := []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: args, StartMarker: true,
				Operation: &schema.Operation{Task: worker.DefaultTask, Key: fmt.Sprintf("op-%032d", i), Contract: contract}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}},
		}
		for _, ev := range evs {
			if _, err := lg.Append(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
	}

	const batch = 100
	var rawDur, sameDur, rtDur time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		if inSess+n > sessionOps {
			b.StopTimer()
			next()
			b.StartTimer()
		}
		t0 := time.Now()
		for i := range n {
			appends(raw, done+i)
		}
		t1 := time.Now()
		for i := range n {
			appends(same, done+i)
			if _, err := budget.Add(ctx, same.Session(), worker.DefaultTask, limit); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		for range n {
			if _, err := rt.Call(ctx, "noop", args); err != nil {
				b.Fatal(err)
			}
		}
		t3 := time.Now()
		rawDur += t1.Sub(t0)
		sameDur += t2.Sub(t1)
		rtDur += t3.Sub(t2)
		done += n
		inSess += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/rtDur.Seconds(), "calls/s")
	b.ReportMetric(float64(b.N)/rawDur.Seconds(), "raw_ops/s")
	b.ReportMetric(rawDur.Seconds()/rtDur.Seconds(), "ratio")
	b.ReportMetric(sameDur.Seconds()/rtDur.Seconds(), "ratio_same_writes")
}
