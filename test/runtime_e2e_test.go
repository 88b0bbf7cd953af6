package test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// TestRuntimeReferenceScenario is the reference scenario on an
// embedded server: orders.create writes its order and then fails; the host
// inspects the confirmed history and issues a plan; the approval hook refuses
// the first retry (spending the plan); the host re-inspects, issues a new
// plan from the latest evidence; the second retry is approved, runs, and the
// tool deduplicates. Three attempts, tool_calls = 3, one order.
func TestRuntimeReferenceScenario(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(tl.List()...)
	if err != nil {
		t.Fatal(err)
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)

	const session, task = "s-ref", "t-1"
	lease, err := topo.Leases().AcquireLease(ctx, session, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().OpenLog(ctx, session, "host-a", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	var approveRetries atomic.Bool
	approval := worker.HookFunc(func(_ context.Context, a worker.Admission) error {
		if a.Operation.Retry != nil && !approveRetries.Load() {
			return errors.New("retry not approved yet")
		}
		return nil
	})
	pl := newPlanner(t)
	rt, err := worker.New(worker.Config{Session: session, Log: lg, Registry: reg, Plans: plans, Budget: budget, Approval: approval, TrustedPlanners: pl.trusted})
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"sku":"A-1","qty":2,"customer":"cust-9"}`)

	// Attempt 1: the order is written, then the tool reports a failure.
	tl.FailAfterWrite(1)
	first, err := rt.CallWithOptions(ctx, tools.OrdersCreate, args, worker.CallOptions{Task: task})
	if !errors.Is(err, schema.ErrFailed) || first.Status != schema.StatusFailed {
		t.Fatalf("attempt 1: %+v %v, want failed", first, err)
	}

	// The host inspects the confirmed history (its only writer is idle) and
	// issues a plan.
	load := func() []schema.Event {
		h, err := topo.Logs().Load(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, err := recovery.Inspect(schema.Events(load()), first.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionRetryAllowed || a.Evidence != string(schema.StatusFailed) {
		t.Fatalf("assessment of attempt 1: %+v", a)
	}
	plan1, err := recovery.PrepareRetry(schema.Events(load()), first.CallID, nil)
	plan1 = pl.sign(t, plan1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Issue(ctx, plan1); err != nil {
		t.Fatal(err)
	}

	// Attempt 2: the approval hook refuses; the plan is spent anyway.
	second, err := rt.CallWithOptions(ctx, tools.OrdersCreate, args, worker.CallOptions{Task: task, Retry: &plan1})
	if !errors.Is(err, schema.ErrRejected) || second.Stage != schema.StageApproval {
		t.Fatalf("attempt 2: %+v %v, want rejected at approval", second, err)
	}
	if rec, err := plans.Get(ctx, plan1.PlanID); err != nil || rec.State != stream.PlanConsumed || rec.ConsumedBy != second.CallID {
		t.Fatalf("plan 1 after attempt 2: %+v %v", rec, err)
	}
	if _, err := rt.CallWithOptions(ctx, tools.OrdersCreate, args, worker.CallOptions{Task: task, Retry: &plan1}); !errors.Is(err, schema.ErrPlanConsumed) {
		t.Fatalf("plan 1 again: %v, want plan_consumed", err)
	}

	// The host re-inspects: the first call is superseded, the latest
	// attempt was never started, and a new plan follows from it.
	if _, err := recovery.Inspect(schema.Events(load()), first.CallID); !errors.Is(err, schema.ErrSupersededCall) {
		t.Fatalf("re-inspect attempt 1: %v, want superseded_call", err)
	}
	a, err = recovery.Inspect(schema.Events(load()), second.CallID)
	if err != nil || a.Outcome != schema.OutcomeNotStarted || a.Decision != schema.DecisionRetryAllowed || a.Attempts != 2 {
		t.Fatalf("assessment of attempt 2: %+v %v", a, err)
	}
	plan2, err := recovery.PrepareRetry(schema.Events(load()), second.CallID, nil)
	plan2 = pl.sign(t, plan2)
	if err != nil {
		t.Fatal(err)
	}
	if plan2.PlanID == plan1.PlanID || plan2.Basis != schema.BasisNotStarted || plan2.Key != first.Operation.Key {
		t.Fatalf("plan 2 %+v", plan2)
	}
	if _, err := plans.Issue(ctx, plan2); err != nil {
		t.Fatal(err)
	}

	// Attempt 3: approved, runs, and orders.create finds the order of
	// attempt 1.
	approveRetries.Store(true)
	third, err := rt.CallWithOptions(ctx, tools.OrdersCreate, args, worker.CallOptions{Task: task, Retry: &plan2})
	if err != nil {
		t.Fatalf("attempt 3: %v", err)
	}
	orders, err := tl.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 1 {
		t.Fatalf("%d orders, want exactly 1: %+v", len(orders), orders)
	}
	var out struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(third.Output, &out); err != nil || out.OrderID != orders[0].OrderID || orders[0].Key != first.Operation.Key {
		t.Fatalf("attempt 3 output %s, order %+v", third.Output, orders[0])
	}

	// The log holds three attempts of one operation; three calls were
	// billed.
	h := load()
	var calls []*schema.Call
	for _, ev := range h {
		if ev.Type == schema.TypeCall {
			calls = append(calls, ev.Call)
		}
	}
	if len(calls) != 3 {
		t.Fatalf("%d attempts in the log, want 3", len(calls))
	}
	// Attempts 1 (the task's first call, counted before its task was
	// reconciled) and 2 (refused) carry a start marker; attempt 3, admitted
	// with its count deferred, is in the combined form (started, no
	// marker: docs/protocol.md §8).
	for i, c := range calls {
		if c.Operation.Key != first.Operation.Key || c.StartMarker != (i < 2) || c.Started != (i == 2) {
			t.Fatalf("attempt %d: %+v (start_marker %v, started %v)", i+1, c.Operation, c.StartMarker, c.Started)
		}
	}
	if calls[1].Operation.Retry.PriorCallID != first.CallID || calls[2].Operation.Retry.PriorCallID != second.CallID ||
		calls[2].Operation.Retry.PlanID != plan2.PlanID || calls[2].Operation.Retry.Basis != schema.BasisNotStarted {
		t.Fatalf("retry links: %+v / %+v", calls[1].Operation.Retry, calls[2].Operation.Retry)
	}
	u, err := budget.Get(ctx, session, task)
	if err != nil || u.ToolCalls != 3 {
		t.Fatalf("tool_calls %+v %v, want 3", u, err)
	}
	a, err = recovery.Inspect(schema.Events(h), third.CallID)
	if err != nil || a.Outcome != schema.OutcomeCompleted || a.Decision != schema.DecisionRefuse || a.Attempts != 3 {
		t.Fatalf("final assessment %+v %v", a, err)
	}
}

// stopAfterCall is a session log whose writer "crashes" right after its
// tool.call is acknowledged: every later append fails.
type stopAfterCall struct {
	log     *stream.Log
	stopped atomic.Bool
}

func (s *stopAfterCall) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	if s.stopped.Load() {
		return 0, errors.New("process stopped")
	}
	seq, err := s.log.Append(ctx, ev)
	if ev.Type == schema.TypeCall {
		s.stopped.Store(true)
	}
	return seq, err
}

// TestRuntimeCrashBeforeStarted: a writer that stops between tool.call and
// tool.started leaves a call that recovery classifies not_started, after a
// takeover (lease, fence, load); the new writer may then retry it.
func TestRuntimeCrashBeforeStarted(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	const session = "s-crash"
	lg, err := topo.Logs().OpenLog(ctx, session, "host-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	charge := tl.PaymentsChargeTool()
	inner := charge.Body
	charge.Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		ran.Add(1)
		return inner(ctx, req)
	}
	reg, _ := worker.NewRegistry(charge)
	crashing := &stopAfterCall{log: lg}
	pl := newPlanner(t)
	rt, err := worker.New(worker.Config{Session: session, Log: crashing, Registry: reg, Plans: plans, Budget: budget, TrustedPlanners: pl.trusted})
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"account":"acc-1","amount_cents":1200}`)
	res, err := rt.Call(ctx, tools.PaymentsCharge, args)
	if err == nil || res.CallID == "" {
		t.Fatalf("call on a crashing writer: %+v %v", res, err)
	}
	if ran.Load() != 0 {
		t.Fatal("body ran without tool.started")
	}

	// Takeover: a new lease epoch, fence, load the confirmed history.
	lease, err := topo.Leases().AcquireLease(ctx, session, "host-b")
	if err != nil {
		t.Fatal(err)
	}
	lg2, err := topo.Logs().Fence(ctx, session, "host-b", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	h, err := topo.Logs().Load(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	a, err := recovery.Inspect(schema.Events(h), res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schema.OutcomeNotStarted || a.Decision != schema.DecisionRetryAllowed || a.Evidence != recovery.EvidenceNotStartedMarker {
		t.Fatalf("assessment %+v, want not_started by marker", a)
	}
	// Even for a non-idempotent tool the plan needs no review: the body
	// never ran.
	plan, err := recovery.PrepareRetry(schema.Events(h), res.CallID, nil)
	plan = pl.sign(t, plan)
	if err != nil || plan.Basis != schema.BasisNotStarted {
		t.Fatalf("plan %+v %v", plan, err)
	}
	if _, err := plans.Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	rt2, err := worker.New(worker.Config{Session: session, Log: lg2, Registry: reg, Plans: plans, Budget: budget, TrustedPlanners: pl.trusted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt2.CallWithOptions(ctx, tools.PaymentsCharge, args, worker.CallOptions{Retry: &plan, Task: plan.Task}); err != nil {
		t.Fatal(err)
	}
	ledger, err := tl.Ledger(ctx)
	if err != nil || len(ledger) != 1 || ran.Load() != 1 {
		t.Fatalf("ledger %+v (%v), body runs %d: want exactly one charge", ledger, err, ran.Load())
	}
	// The old writer is fenced for good.
	if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: res.CallID}}); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("old writer append: %v, want fenced", err)
	}
}
