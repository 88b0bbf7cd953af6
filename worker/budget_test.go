package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// storedCalls is what jw_budget holds for session and task, read by a
// Budget of its own (another process's view, without deferred counts).
func (l *live) storedCalls(t *testing.T, session, task string) stream.Usage {
	t.Helper()
	u, err := stream.NewBudget(l.topo.Budget).Get(context.Background(), session, task)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// recordedCalls counts the tool.call events of task in session's log.
func (l *live) recordedCalls(t *testing.T, session, task string) (int64, []schema.Event) {
	t.Helper()
	h, err := l.topo.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ev := range h {
		if ev.Type == schema.TypeCall && ev.Call.Operation != nil && ev.Call.Operation.Task == task {
			n++
		}
	}
	return n, h
}

var lookupArgs = json.RawMessage(`{"sku":"A-1"}`)

// crashedWriter runs calls tool calls of task t-1 on a fresh session s-1
// whose counter never writes deferred counts on its own, then abandons the
// runtime as a crash would: the deferred counts are lost.
func (l *live) crashedWriter(t *testing.T, calls int) {
	t.Helper()
	ctx := context.Background()
	lost := stream.NewBudgetWith(l.topo.Budget, stream.BudgetConfig{FlushInterval: time.Hour})
	rt := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.Budget = lost })
	for range calls {
		if _, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if u := l.storedCalls(t, "s-1", "t-1"); u.ToolCalls >= int64(calls) {
		t.Fatalf("stored %+v after %d calls: the counts were not deferred", u, calls)
	}
}

// takeOver fences s-1 for a new owner and returns a runtime on it that
// knows the confirmed history.
func (l *live) takeOver(t *testing.T, budget *stream.Budget) *worker.Runtime {
	t.Helper()
	ctx := context.Background()
	lg, err := l.topo.Logs().Fence(ctx, "s-1", "host-b", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, h := l.recordedCalls(t, "s-1", "t-1")
	reg, err := worker.NewRegistry(l.tools.CatalogLookupTool())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: "s-1", Log: lg, Registry: reg, Plans: l.plans, Budget: budget, History: h})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestDeferredCountsCrashLimit: a writer defers its counts and crashes
// before they are written; an operator then sets a limit that the recorded
// attempts already reach. The next owner reconciles with the confirmed
// history, so its first call is refused at stage budget (without the
// history it would see a count far below the limit), and jw_budget ends
// equal to the tool.call events in the log.
func TestDeferredCountsCrashLimit(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	const calls = 5
	l.crashedWriter(t, calls)
	if _, err := stream.NewBudget(l.topo.Budget).SetLimit(ctx, "s-1", "t-1", calls); err != nil {
		t.Fatal(err)
	}
	rt := l.takeOver(t, stream.NewBudget(l.topo.Budget))
	_, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"})
	var werr *schema.Error
	if !errors.As(err, &werr) || werr.Code != schema.CodeRejected || werr.Stage != schema.StageBudget {
		t.Fatalf("first call of the new owner: %v, want rejected at stage budget", err)
	}
	n, _ := l.recordedCalls(t, "s-1", "t-1")
	if u := l.storedCalls(t, "s-1", "t-1"); u.ToolCalls != n || n != calls+1 {
		t.Fatalf("stored %+v, log has %d tool.call (want %d)", u, n, calls+1)
	}
}

// TestDeferredCountsCrashNoLimit: the same crash without a limit; the new
// owner's count covers every recorded attempt once its own deferred counts
// are flushed.
func TestDeferredCountsCrashNoLimit(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	l.crashedWriter(t, 4)
	rt := l.takeOver(t, stream.NewBudgetWith(l.topo.Budget, stream.BudgetConfig{FlushInterval: time.Hour}))
	for range 3 {
		if _, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ := l.recordedCalls(t, "s-1", "t-1")
	if u := l.storedCalls(t, "s-1", "t-1"); u.ToolCalls != n || n != 7 {
		t.Fatalf("stored %+v, log has %d tool.call (want 7)", u, n)
	}
}

// TestCountsWithoutHistoryAreWritten: a runtime that does not know what its
// log held when it was opened (no History, log not empty) cannot reconcile,
// so it defers nothing: jw_budget is exact after every call.
func TestCountsWithoutHistoryAreWritten(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	budget := stream.NewBudgetWith(l.topo.Budget, stream.BudgetConfig{FlushInterval: time.Hour})
	first := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.Budget = budget })
	if _, err := first.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"}); err != nil {
		t.Fatal(err)
	}
	// A second runtime on a log that is no longer empty (same writer).
	rt := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.Budget = budget })
	for i := range 3 {
		if _, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-2"}); err != nil {
			t.Fatal(err)
		}
		if u := l.storedCalls(t, "s-1", "t-2"); u.ToolCalls != int64(i+1) {
			t.Fatalf("after call %d stored %+v", i+1, u)
		}
	}
}

// TestDeferredCountsConcurrentCalls: many concurrent calls of a task
// without a limit are counted exactly, nothing lost or doubled, once the
// runtime flushes.
func TestDeferredCountsConcurrentCalls(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	budget := stream.NewBudgetWith(l.topo.Budget, stream.BudgetConfig{FlushInterval: time.Millisecond})
	rt := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.Budget = budget })
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 5 {
				if _, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := rt.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ := l.recordedCalls(t, "s-1", "t-1")
	if u := l.storedCalls(t, "s-1", "t-1"); u.ToolCalls != n || n != 30 {
		t.Fatalf("stored %+v, log has %d tool.call (want 30)", u, n)
	}
}

// slowCounter is a Counter whose writes take a while (a jw_budget leader
// far away): each Add waits, then counts.
type slowCounter struct {
	worker.Counter
	wait time.Duration
}

func (c slowCounter) Add(ctx context.Context, session, task string, limit int64) (stream.Usage, error) {
	time.Sleep(c.wait)
	return c.Counter.Add(ctx, session, task, limit)
}

// TestCallReturnsAfterItsCount: an attempt counted alongside its tool.call
// is counted by the time the call returns, on every path — a call refused
// before the budget stage (which never waits for the count) and a call
// whose tool.call did not reach the log. A count still in flight after the
// return would be lost with the process, and it made a caller's
// before/after reading of the budget race (TestPlanCompletedByNextOwner
// failed 1 run in 30 on it).
func TestCallReturnsAfterItsCount(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		mod  func(l *live, c *worker.Config)
		want string // the call's error code
	}{
		{"refused at stage permission", func(_ *live, c *worker.Config) {
			c.Permission = worker.HookFunc(func(context.Context, worker.Admission) error { return errors.New("not this agent") })
		}, string(schema.CodeRejected)},
		{"tool.call not recorded", func(l *live, c *worker.Config) {
			lg, err := l.topo.Logs().OpenLog(ctx, "s-1", "host", 1)
			if err != nil {
				t.Fatal(err)
			}
			c.Log = appendFails{lg, schema.TypeCall, errors.New("injected: the server went away")}
		}, string(schema.CodeLog)},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := liveSetup(t)
			rt := l.runtime(t, "s-1", tools.OrdersRevision, func(cfg *worker.Config) {
				cfg.Budget = slowCounter{stream.NewBudget(l.topo.Budget), 300 * time.Millisecond}
				c.mod(l, cfg)
			})
			res, err := rt.CallWithOptions(ctx, tools.CatalogLookup, lookupArgs, worker.CallOptions{Task: "t-1"})
			if got := string(schema.CodeOf(err)); got != c.want {
				t.Fatalf("call: %+v, %v; want code %q", res, err, c.want)
			}
			if c.want == string(schema.CodeRejected) && (res.Status != schema.StatusRejected || res.Stage != schema.StagePermission) {
				t.Fatalf("call: %+v, want rejected", res)
			}
			if u := l.storedCalls(t, "s-1", "t-1"); u.ToolCalls != 1 {
				t.Fatalf("jw_budget holds %d calls of t-1 when the call returned, want 1", u.ToolCalls)
			}
		})
	}
}
