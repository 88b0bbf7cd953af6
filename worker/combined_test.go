package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// deferCounter is a DeferringCounter in memory: a key is deferred once it
// was reconciled and while limit is 0 (as stream.Budget defers a key it
// knows to have no limit).
type deferCounter struct {
	memCounter
	mu         sync.Mutex
	limit      int64
	reconciled map[string]bool
	deferred   int
}

func (c *deferCounter) Defer(session, task string) (stream.Usage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reconciled[session+"."+task] || c.limit != 0 {
		return stream.Usage{}, false
	}
	c.deferred++
	u, _ := c.memCounter.Add(context.Background(), session, task, 0)
	return u, true
}

func (c *deferCounter) Reconcile(ctx context.Context, session, task string, recorded, limit int64) (stream.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reconciled == nil {
		c.reconciled = map[string]bool{}
	}
	c.reconciled[session+"."+task] = true
	return stream.Usage{ToolCalls: c.get(session, task), Limit: c.limit}, nil
}

func (c *deferCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deferred
}

// eventsObserver records what a runtime tells its Observer.
type eventsObserver struct {
	mu  sync.Mutex
	evs []schema.Event
}

func (o *eventsObserver) Appended(ev schema.Event, _ time.Duration, err error) {
	if err == nil {
		o.mu.Lock()
		o.evs = append(o.evs, ev)
		o.mu.Unlock()
	}
}

// setupDeferred is setup with a deferring counter and a known (empty)
// history: a task's first call reconciles it and is counted at once (the
// three-event form), every later call of it is counted in memory.
func setupDeferred(t *testing.T, tool worker.Tool, mod func(*worker.Config)) (*fixture, *deferCounter) {
	t.Helper()
	dc := &deferCounter{}
	f := setup(t, tool, func(c *worker.Config) {
		c.Budget, c.History = dc, []schema.Event{}
		if mod != nil {
			mod(c)
		}
	})
	return f, dc
}

// since returns the events of the log from index i on.
func since(l *memLog, i int) []schema.Event { return l.all()[i:] }

// TestCombinedFormAppends: an admitted call whose admission needs no wait
// (no approval wanted, its task's count deferred) costs two appends —
// tool.call{started: true} (no start marker) and tool.result —; the first
// call of a task (its count written before the budget stage decides)
// costs three, as does a task with a limit; a refused call still leaves
// its call (with a start marker) and its rejection; the Observer is told
// of the combined tool.call as the call's start.
func TestCombinedFormAppends(t *testing.T) {
	obs := &eventsObserver{}
	f, dc := setupDeferred(t, worker.Tool{Body: okBody()}, func(c *worker.Config) {
		c.Observer = obs
		c.Guard = worker.HookFunc(func(_ context.Context, a worker.Admission) error {
			if string(a.Arguments) == `{"refuse":true}` {
				return errors.New("guarded")
			}
			return nil
		})
	})
	ctx := context.Background()

	// The first call of the task: counted before the task was reconciled.
	if _, err := f.rt.Call(ctx, "probe", nil); err != nil {
		t.Fatal(err)
	}
	if got := f.log.types(); got != "tool.call,tool.started,tool.result" {
		t.Fatalf("first call: %s, want the three-event form", got)
	}
	if c := f.log.all()[0].Call; !c.StartMarker || c.Started {
		t.Fatalf("first call recorded %+v", c)
	}

	// Every later call: two appends.
	for i := range 3 {
		n := len(f.log.all())
		res, err := f.rt.Call(ctx, "probe", nil)
		if err != nil {
			t.Fatal(err)
		}
		evs := since(f.log, n)
		if len(evs) != 2 || evs[0].Type != schema.TypeCall || evs[1].Type != schema.TypeResult || evs[1].Result.Status != schema.StatusOK {
			t.Fatalf("call %d: %d events %+v, want tool.call and tool.result", i, len(evs), evs)
		}
		if c := evs[0].Call; !c.Started || c.StartMarker || c.CallID != res.CallID || res.CallSeq != evs[0].Seq {
			t.Fatalf("call %d recorded %+v (result %+v)", i, c, res)
		}
	}
	if f.runs.Load() != 4 || dc.count() != 3 || dc.get("s-1", worker.DefaultTask) != 4 {
		t.Fatalf("%d body runs, %d deferred counts, %d counted; want 4, 3, 4", f.runs.Load(), dc.count(), dc.get("s-1", worker.DefaultTask))
	}

	// A refusal decided before anything is written still records both.
	n := len(f.log.all())
	res, err := f.rt.Call(ctx, "probe", json.RawMessage(`{"refuse":true}`))
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageGuard {
		t.Fatalf("refused call: %+v %v", res, err)
	}
	evs := since(f.log, n)
	if len(evs) != 2 || evs[0].Call == nil || !evs[0].Call.StartMarker || evs[0].Call.Started ||
		evs[1].Result == nil || evs[1].Result.Status != schema.StatusRejected || evs[1].Result.Stage != schema.StageGuard {
		t.Fatalf("refused call recorded %+v", evs)
	}
	if f.runs.Load() != 4 || dc.get("s-1", worker.DefaultTask) != 5 {
		t.Fatalf("refusal: %d runs, %d counted", f.runs.Load(), dc.get("s-1", worker.DefaultTask))
	}

	// The whole log is a valid history: every call assessed by its result.
	h := f.log.all()
	for _, ev := range h {
		if ev.Call == nil {
			continue
		}
		a, err := recovery.Inspect(schema.Events(h), ev.Call.CallID)
		if err != nil {
			t.Fatalf("Inspect %s: %v", ev.Call.CallID, err)
		}
		if a.Outcome == schema.OutcomeUncertain {
			t.Fatalf("%s assessed %+v", ev.Call.CallID, a)
		}
	}

	// The Observer saw every append, the combined tool.calls as starts.
	obs.mu.Lock()
	starts := 0
	for _, ev := range obs.evs {
		if ev.Type == schema.TypeStarted || (ev.Call != nil && ev.Call.Started) {
			starts++
		}
	}
	seen := len(obs.evs)
	obs.mu.Unlock()
	if seen != len(h) || starts != 4 {
		t.Fatalf("observer saw %d appends with %d starts; want %d and 4", seen, starts, len(h))
	}

	// A task with a limit is counted at once: the three-event form.
	dc.mu.Lock()
	dc.limit = 100
	dc.mu.Unlock()
	n = len(f.log.all())
	if _, err := f.rt.Call(ctx, "probe", nil); err != nil {
		t.Fatal(err)
	}
	if evs := since(f.log, n); len(evs) != 3 || evs[0].Call.Started || evs[1].Type != schema.TypeStarted {
		t.Fatalf("call of a task with a limit: %+v, want the three-event form", evs)
	}
}

// TestCombinedFormNotWithApproval: a call that wants an approval keeps
// the three-event form even when its count is deferred: tool.call with a
// start marker, approval.requested, and its body waits; a call of the
// same tool that wants none is recorded in the combined form.
func TestCombinedFormNotWithApproval(t *testing.T) {
	f, _ := setupDeferred(t, chargeTool(), nil)
	ctx := context.Background()
	call := func(amount string) (worker.Result, error) {
		return f.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":`+amount+`}`), worker.CallOptions{Task: "t-1"})
	}
	if _, err := call("1"); err != nil { // reconciles t-1
		t.Fatal(err)
	}
	n := len(f.log.all())
	res, err := call("5000")
	if !errors.Is(err, schema.ErrApprovalPending) {
		t.Fatalf("big charge: %+v %v, want approval_pending", res, err)
	}
	evs := since(f.log, n)
	if len(evs) != 2 || evs[0].Call == nil || !evs[0].Call.StartMarker || evs[0].Call.Started || evs[1].Type != schema.TypeApprovalRequested {
		t.Fatalf("waiting call recorded %+v", evs)
	}
	n = len(f.log.all())
	if _, err := call("2"); err != nil {
		t.Fatal(err)
	}
	if evs := since(f.log, n); len(evs) != 2 || !evs[0].Call.Started {
		t.Fatalf("small charge recorded %+v, want the combined form", evs)
	}
	if f.runs.Load() != 2 {
		t.Fatalf("%d body runs, want 2 (the waiting call's body waits)", f.runs.Load())
	}
}

// gateLog is a memLog whose tool.call appends wait at a gate: entered
// is signalled when one arrives, and it proceeds when gate is closed
// (or fails with failWith, if set, without recording anything).
type gateLog struct {
	memLog
	entered  chan struct{}
	gate     chan struct{}
	failWith error
}

func (l *gateLog) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	if ev.Type == schema.TypeCall {
		l.entered <- struct{}{}
		<-l.gate
		if l.failWith != nil {
			return 0, l.failWith
		}
	}
	return l.memLog.Append(ctx, ev)
}

// TestCombinedFormBodyWaitsForAck: the body of a combined-form call never
// starts before its tool.call{started} is acknowledged; if that append
// fails — the log unavailable, or the writer fenced — the body does not
// run and nothing is on the log.
func TestCombinedFormBodyWaitsForAck(t *testing.T) {
	for _, tt := range []struct {
		name string
		fail error
		code schema.Code
	}{
		{"acknowledged", nil, ""},
		{"log unavailable", errors.New("nats: timeout"), schema.CodeLog},
		{"fenced", stream.ErrFenced, schema.CodeFenced},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gl := &gateLog{entered: make(chan struct{}, 1), gate: make(chan struct{})}
			f, _ := setupDeferred(t, worker.Tool{Body: okBody()}, func(c *worker.Config) { c.Log = gl })
			// Reconcile the task through the gate.
			close(gl.gate)
			if _, err := f.rt.Call(context.Background(), "probe", nil); err != nil {
				t.Fatal(err)
			}
			<-gl.entered
			gl.gate, gl.failWith = make(chan struct{}), tt.fail
			before := len(gl.all())

			type out struct {
				res worker.Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := f.rt.Call(context.Background(), "probe", nil)
				done <- out{res, err}
			}()
			<-gl.entered // the combined tool.call is being appended, not acknowledged
			select {
			case o := <-done:
				t.Fatalf("call returned %+v before its tool.call was acknowledged", o)
			case <-time.After(50 * time.Millisecond):
			}
			if f.runs.Load() != 1 {
				t.Fatal("the body started before its tool.call{started} was acknowledged")
			}
			close(gl.gate)
			o := <-done
			evs := since(&gl.memLog, before)
			if tt.fail == nil {
				if o.err != nil || f.runs.Load() != 2 || len(evs) != 2 || !evs[0].Call.Started {
					t.Fatalf("acknowledged: %+v, %d runs, events %+v", o, f.runs.Load(), evs)
				}
				return
			}
			if schema.CodeOf(o.err) != tt.code || f.runs.Load() != 1 || len(evs) != 0 {
				t.Fatalf("failed append: %v (want %s), %d runs (want 1), events %+v (want none)", o.err, tt.code, f.runs.Load(), evs)
			}
			if tt.fail == stream.ErrFenced {
				// A fenced runtime writes nothing more.
				if _, err := f.rt.Call(context.Background(), "probe", nil); !errors.Is(err, stream.ErrFenced) || f.runs.Load() != 1 {
					t.Fatalf("after the fence: %v, %d runs", err, f.runs.Load())
				}
			}
		})
	}
}

// TestCombinedFormCrashBeforeResult: a writer that dies after its
// combined tool.call and before the result (here: the result append
// fails) leaves a call that, once the session is fenced, is uncertain with
// evidence no_result — retry_allowed for an idempotent tool, needs_review
// for a non-idempotent one — never not_started: its body ran.
func TestCombinedFormCrashBeforeResult(t *testing.T) {
	for _, tt := range []struct {
		eff      effect.Effect
		decision schema.Decision
	}{
		{effect.Idempotent, schema.DecisionRetryAllowed},
		{effect.NonIdempotent, schema.DecisionNeedsReview},
	} {
		t.Run(tt.eff.String(), func(t *testing.T) {
			tool := worker.Tool{Metadata: effect.Metadata{Name: "probe"}.WithEffect(tt.eff, "probe-v1"), Body: okBody()}
			f, _ := setupDeferred(t, tool, nil)
			if _, err := f.rt.Call(context.Background(), "probe", nil); err != nil {
				t.Fatal(err)
			}
			f.log.mu.Lock()
			f.log.failOn, f.log.err = schema.TypeResult, errors.New("process killed")
			f.log.mu.Unlock()
			res, err := f.rt.Call(context.Background(), "probe", nil)
			if !errors.Is(err, schema.ErrLog) || f.runs.Load() != 2 {
				t.Fatalf("call: %+v %v, %d runs", res, err, f.runs.Load())
			}
			h := f.log.all()
			if last := h[len(h)-1]; last.Call == nil || !last.Call.Started || last.Call.CallID != res.CallID {
				t.Fatalf("the log ends with %+v, want the combined tool.call", last)
			}
			h = append(h, schema.Event{V: 1, Seq: uint64(len(h) + 1), Session: "s-1", Epoch: 1, At: time.Now().UTC(), Type: schema.TypeFenced,
				Fence: &schema.Fence{Epoch: 1, Owner: "recovery-1"}})
			a, err := recovery.Inspect(schema.Events(h), res.CallID)
			if err != nil {
				t.Fatal(err)
			}
			if a.Outcome != schema.OutcomeUncertain || a.Evidence != recovery.EvidenceNoResult || a.Decision != tt.decision {
				t.Fatalf("assessed %s/%s/%s, want uncertain/no_result/%s", a.Outcome, a.Evidence, a.Decision, tt.decision)
			}
		})
	}
}

// TestCombinedFormStopLock: a task.stopped never comes between a call's
// stop check and its tool.call, also when admission runs before the
// tool.call is written: StopTask waits while the call's admission hook
// runs, and its task.stopped follows the call's tool.call.
func TestCombinedFormStopLock(t *testing.T) {
	inGuard, release := make(chan struct{}, 1), make(chan struct{})
	var block sync.Once
	f, _ := setupDeferred(t, worker.Tool{Body: okBody()}, func(c *worker.Config) {
		c.Guard = worker.HookFunc(func(_ context.Context, a worker.Admission) error {
			if string(a.Arguments) == `{"slow":true}` {
				block.Do(func() { inGuard <- struct{}{}; <-release })
			}
			return nil
		})
	})
	ctx := context.Background()
	if _, err := f.rt.Call(ctx, "probe", nil); err != nil { // reconciles the task
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := f.rt.Call(ctx, "probe", json.RawMessage(`{"slow":true}`))
		called <- err
	}()
	<-inGuard
	stopped := make(chan error, 1)
	go func() { stopped <- f.rt.StopTask(ctx, worker.DefaultTask, "alice@ops", "enough") }()
	select {
	case err := <-stopped:
		t.Fatalf("StopTask returned %v while a call of the task was being admitted", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-called; err != nil {
		t.Fatalf("the call admitted before the stop: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	callAt, stopAt := -1, -1
	for i, ev := range f.log.all() {
		switch {
		case ev.Call != nil && string(ev.Call.Arguments) == `{"slow":true}`:
			callAt = i
			if !ev.Call.Started {
				t.Errorf("the slow call was recorded %+v, want the combined form", ev.Call)
			}
		case ev.Type == schema.TypeTaskStopped:
			stopAt = i
		}
	}
	if callAt < 0 || stopAt < callAt {
		t.Fatalf("tool.call at %d, task.stopped at %d: the stop came between the check and the call (%s)", callAt, stopAt, f.log.types())
	}
	if _, err := f.rt.Call(ctx, "probe", nil); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("a call after the stop: %v, want task_stopped", err)
	}
}

// TestCombinedFormLive runs the combined form against JetStream: the
// second call of a task is two events on the stream, read back with
// started true and no start marker; a retry under a plan of a
// combined-form attempt that failed is itself recorded in the combined
// form (the plan verified and consumed first); and a writer that dies
// after a combined tool.call, its body done, leaves a call that the next
// owner's confirmed history classifies uncertain (no_result), never
// not_started.
func TestCombinedFormLive(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	call := func(args string, opts worker.CallOptions) (worker.Result, error) {
		opts.Task = "t-1"
		return rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), opts)
	}
	if _, err := call(`{"sku":"A-1","qty":1}`, worker.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	second, err := call(`{"sku":"A-2","qty":1}`, worker.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 5 || h[3].Call == nil || !h[3].Call.Started || h[3].Call.StartMarker || h[3].Seq != second.CallSeq || h[4].Result == nil {
		t.Fatalf("history %+v: want the first call in three events, the second in two", h)
	}

	// A failed combined-form attempt, planned and retried.
	_, plan := l.failedOrder(t, rt, `{"sku":"B-1","qty":2}`)
	retry, err := call(`{"sku":"B-1","qty":2}`, worker.CallOptions{Retry: &plan})
	if err != nil {
		t.Fatal(err)
	}
	h, _ = l.topo.Logs().Load(ctx, "s-1")
	if last := h[len(h)-2]; last.Call == nil || last.Call.CallID != retry.CallID || !last.Call.Started || last.Call.Operation.Retry == nil || last.Call.Operation.Retry.PlanID != plan.PlanID {
		t.Fatalf("retry recorded %+v", last)
	}
	if prior := h[len(h)-4]; prior.Call == nil || prior.Call.CallID != plan.PriorCallID || !prior.Call.Started {
		t.Fatalf("the failed attempt recorded %+v, want the combined form", prior)
	}
	if _, err := call(`{"sku":"B-1","qty":2}`, worker.CallOptions{Retry: &plan}); !errors.Is(err, schema.ErrPlanConsumed) {
		t.Fatalf("the plan again: %v, want plan_consumed", err)
	}

	// A writer killed after its combined tool.call and its body.
	lg, err := l.topo.Logs().OpenLog(ctx, "s-2", "host", 1)
	if err != nil {
		t.Fatal(err)
	}
	dead := l.runtime(t, "s-2", tools.OrdersRevision, func(c *worker.Config) {
		c.Log, c.History = appendFails{lg, schema.TypeResult, errors.New("killed before the result")}, []schema.Event{}
	})
	if _, err := dead.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"sku":"C-1","qty":1}`), worker.CallOptions{Task: "t-1"}); !errors.Is(err, schema.ErrLog) {
		t.Fatalf("first call (three-event form, result lost): %v", err)
	}
	lost, err := dead.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"sku":"C-2","qty":1}`), worker.CallOptions{Task: "t-1"})
	if !errors.Is(err, schema.ErrLog) {
		t.Fatalf("second call: %v", err)
	}
	if _, h, err = l.topo.Logs().FenceLoad(ctx, "s-2", "next-owner", 2); err != nil {
		t.Fatal(err)
	}
	a, err := recovery.Inspect(schema.Events(h), lost.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schema.OutcomeUncertain || a.Evidence != recovery.EvidenceNoResult || a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("the killed writer's combined call assessed %+v", a)
	}
	orders, err := l.tools.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, o := range orders {
		ran = ran || o.Key == lost.Operation.Key
	}
	if !ran {
		t.Fatal("the body of the lost call did not run: the test proves nothing")
	}
}

// TestCombinedFormWhenSeesValidArguments: deciding before anything is
// written whether a call waits for approval never hands ApprovalRule.When
// arguments that fail the input schema (it is promised valid ones): such a
// call is refused at stage arguments, in two events, When never asked;
// valid arguments that When selects wait in the three-event form.
func TestCombinedFormWhenSeesValidArguments(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	tool := chargeTool()
	tool.InputSchema = json.RawMessage(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"}}}`)
	tool.Approval.When = func(args json.RawMessage) bool {
		mu.Lock()
		asked = append(asked, string(args))
		mu.Unlock()
		var a struct{ Amount int64 }
		if err := json.Unmarshal(args, &a); err != nil {
			panic("When handed arguments that fail the schema: " + string(args))
		}
		return a.Amount > 1000
	}
	f, _ := setupDeferred(t, tool, nil)
	ctx := context.Background()
	call := func(args string) (worker.Result, error) {
		return f.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(args), worker.CallOptions{Task: "t-1"})
	}
	if _, err := call(`{"amount":1}`); err != nil { // reconciles t-1
		t.Fatal(err)
	}
	n := len(f.log.all())
	res, err := call(`{"amount":"lots"}`)
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageArguments {
		t.Fatalf("invalid arguments: %+v %v, want rejected at arguments", res, err)
	}
	if evs := since(f.log, n); len(evs) != 2 || !evs[0].Call.StartMarker || evs[1].Result.Stage != schema.StageArguments {
		t.Fatalf("invalid arguments recorded %+v", evs)
	}
	mu.Lock()
	for _, a := range asked {
		if a == `{"amount":"lots"}` {
			t.Errorf("When was asked about arguments that fail the schema")
		}
	}
	mu.Unlock()
	n = len(f.log.all())
	if _, err := call(`{"amount":5000}`); !errors.Is(err, schema.ErrApprovalPending) {
		t.Fatalf("big charge: %v, want approval_pending", err)
	}
	if evs := since(f.log, n); len(evs) != 2 || !evs[0].Call.StartMarker || evs[1].Type != schema.TypeApprovalRequested {
		t.Fatalf("big charge recorded %+v", evs)
	}
}
