package worker

// Tests of CallWithOptions's stages run alone: each stage is given a call
// in the state the stages before it leave, and what it decides and writes
// is checked without the rest of the pipeline.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// stageLog is an in-memory session log; err, when set, fails every append.
type stageLog struct {
	mu     sync.Mutex
	events []schema.Event
	err    error
}

func (l *stageLog) Append(_ context.Context, ev schema.Event) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	ev.Seq = uint64(len(l.events) + 1)
	l.events = append(l.events, ev)
	return ev.Seq, nil
}

func (l *stageLog) all() []schema.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]schema.Event(nil), l.events...)
}

// stageCounter counts in memory and defers every count (as a
// stream.Budget does for a reconciled task without a limit).
type stageCounter struct {
	mu    sync.Mutex
	calls int64
	adds  int
}

func (c *stageCounter) Add(context.Context, string, string, int64) (stream.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.adds++
	return stream.Usage{ToolCalls: c.calls}, nil
}

func (c *stageCounter) Defer(string, string) (stream.Usage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return stream.Usage{ToolCalls: c.calls}, true
}

func (c *stageCounter) Reconcile(context.Context, string, string, int64, int64) (stream.Usage, error) {
	return stream.Usage{}, nil
}

type stagePlans struct{}

func (stagePlans) Get(context.Context, string) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
func (stagePlans) Consume(context.Context, stream.PlanRecord, string, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
func (stagePlans) Complete(context.Context, stream.PlanRecord, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}

// stageRuntime returns a runtime with the tools "probe" (no approval) and
// "gated" (every call waits for approval) on in-memory fakes; the
// runtime knows its (empty) history, so its counts are deferred once a
// task is reconciled.
func stageRuntime(t *testing.T, mod func(*Config)) (*Runtime, *stageLog, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	body := func(context.Context, BodyRequest) (json.RawMessage, error) {
		runs.Add(1)
		return json.RawMessage(`{"ok":true}`), nil
	}
	reg, err := NewRegistry(
		Tool{Metadata: effect.Metadata{Name: "probe"}.WithEffect(effect.Idempotent, "probe-v1"), Body: body},
		Tool{Metadata: effect.Metadata{Name: "gated"}.WithEffect(effect.Idempotent, "gated-v1"), Body: body, Approval: &ApprovalRule{}},
	)
	if err != nil {
		t.Fatal(err)
	}
	log := &stageLog{}
	cfg := Config{Session: "s-stages", Log: log, Registry: reg, Plans: stagePlans{}, Budget: &stageCounter{}, History: []schema.Event{}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, log, &runs
}

func codeOf(err error) schema.Code {
	var se *schema.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

func TestStageValidateCall(t *testing.T) {
	r, log, _ := stageRuntime(t, nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	long := strings.Repeat("x", schema.MaxFieldBytes+1)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		tool string
		args string
		opts CallOptions
		code schema.Code
	}{
		{"unknown tool", context.Background(), "nope", `{}`, CallOptions{}, schema.CodeUnknownTool},
		{"arguments not JSON", context.Background(), "probe", `{`, CallOptions{}, schema.CodeInvalidCall},
		{"task malformed", context.Background(), "probe", `{}`, CallOptions{Task: "a b"}, schema.CodeInvalidCall},
		{"request id too long", context.Background(), "probe", `{}`, CallOptions{RequestID: long}, schema.CodeInvalidCall},
		{"provider id too long", context.Background(), "probe", `{}`, CallOptions{ProviderCallID: long}, schema.CodeInvalidCall},
	} {
		if _, err := r.validateCall(tc.ctx, tc.tool, json.RawMessage(tc.args), tc.opts); codeOf(err) != tc.code {
			t.Errorf("%s: err %v, want code %s", tc.name, err, tc.code)
		}
	}
	if _, err := r.validateCall(cancelled, "probe", nil, CallOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("caller gone: err %v, want context.Canceled", err)
	}

	c, err := r.validateCall(context.Background(), "probe", nil, CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(c.args) != `{}` || c.task != DefaultTask || c.t.Metadata.Name != "probe" {
		t.Errorf("nil args, no task: args %s task %q tool %q, want {} %q probe", c.args, c.task, c.t.Metadata.Name, DefaultTask)
	}
	c, err = r.validateCall(context.Background(), "probe", nil, CallOptions{Retry: &schema.Plan{Task: "from-plan"}})
	if err != nil || c.task != "from-plan" {
		t.Errorf("a retry naming no task: task %q (err %v), want the plan's", c.task, err)
	}

	r.fenced.Store(true)
	if _, err := r.validateCall(context.Background(), "probe", nil, CallOptions{}); codeOf(err) != schema.CodeFenced || !errors.Is(err, stream.ErrFenced) {
		t.Errorf("fenced runtime: err %v, want fenced", err)
	}
	if n := len(log.all()); n != 0 {
		t.Errorf("validateCall wrote %d events, want none", n)
	}
}

func TestStageHoldStop(t *testing.T) {
	r, log, _ := stageRuntime(t, nil)
	ctx := context.Background()
	if err := r.StopTask(ctx, "stopped", schema.StoppedByHost, "test"); err != nil {
		t.Fatal(err)
	}
	c := &call{task: "stopped"}
	err := r.holdStop(c)
	c.stop.release()
	if codeOf(err) != schema.CodeTaskStopped {
		t.Fatalf("holdStop of a stopped task: %v, want task_stopped", err)
	}

	// A held stop lock keeps a task.stopped out until it is released.
	c = &call{task: "live"}
	if err := r.holdStop(c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.StopTask(ctx, "live", schema.StoppedByHost, "test") }()
	select {
	case err := <-done:
		t.Fatalf("StopTask returned (%v) while a call held the stop lock", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.stop.release()
	c.stop.release() // a second release is a no-op
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(log.all()); n != 2 {
		t.Errorf("%d events, want the two task.stopped", n)
	}
}

func TestStageIdentify(t *testing.T) {
	r, log, _ := stageRuntime(t, nil)
	ctx := context.Background()
	c, err := r.validateCall(ctx, "probe", json.RawMessage(`{"a":1}`), CallOptions{Task: "t1", RequestID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.identify(ctx, c); err != nil {
		t.Fatal(err)
	}
	switch {
	case !strings.HasPrefix(c.callID, "c-") || len(c.callID) != 2+2*defaultRandomIDBytes:
		t.Errorf("call id %q", c.callID)
	case !strings.HasPrefix(c.op.Key, "op-") || c.op.Task != "t1" || c.op.Contract != c.t.Metadata.Contract || c.op.Retry != nil:
		t.Errorf("operation %+v", c.op)
	case c.res.CallID != c.callID || c.res.Operation.Key != c.op.Key:
		t.Errorf("result %+v does not name the call", c.res)
	case c.admission(r).CallID != c.callID || c.admission(r).RequestID != "req-1" || string(c.admission(r).Arguments) != `{"a":1}` || c.admission(r).Session != "s-stages":
		t.Errorf("admission %+v", c.admission(r))
	}

	// A retry whose plan is not in jw_plans is refused, with nothing
	// written.
	c, err = r.validateCall(ctx, "probe", nil, CallOptions{Retry: &schema.Plan{PlanID: "p-1", Task: "t1", PriorCallID: "c-old"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.identify(ctx, c); !errors.Is(err, schema.ErrPlanRefused) {
		t.Errorf("retry under a plan never issued: %v, want a plan refusal", err)
	}
	// A retry of a call the log already holds a retry of is refused
	// before jw_plans is asked.
	r.noteRetry("c-old", "c-new")
	if err := r.identify(ctx, c); codeOf(err) != schema.CodePlanConsumed {
		t.Errorf("retry of a retried call: %v, want plan_consumed", err)
	}
	if n := len(log.all()); n != 0 {
		t.Errorf("identify wrote %d events, want none", n)
	}
}

// identified returns a call of tool through validateCall and identify.
func identified(t *testing.T, r *Runtime, tool, task string) *call {
	t.Helper()
	c, err := r.validateCall(context.Background(), tool, nil, CallOptions{Task: task})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.identify(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStageAdmitEarly(t *testing.T) {
	guard := HookFunc(func(_ context.Context, a Admission) error {
		if a.Operation.Task == "refused" {
			return errors.New("not this task")
		}
		return nil
	})
	r, log, _ := stageRuntime(t, func(c *Config) { c.Guard = guard })
	ctx := context.Background()

	// A task not yet reconciled has no deferred count: undecided.
	if _, decided := r.admitEarly(ctx, identified(t, r, "probe", "fresh")); decided {
		t.Error("a task whose count is not deferred was decided before anything was written")
	}
	for _, task := range []string{"ok", "refused"} {
		r.reconciled[task] = true
	}
	// A call that waits for approval is never decided early.
	if _, decided := r.admitEarly(ctx, identified(t, r, "gated", "ok")); decided {
		t.Error("a call waiting for approval was decided before anything was written")
	}
	v, decided := r.admitEarly(ctx, identified(t, r, "probe", "ok"))
	if !decided || !v.admitted() {
		t.Errorf("deferred count, no approval: verdict %+v decided %v, want admitted", v, decided)
	}
	v, decided = r.admitEarly(ctx, identified(t, r, "probe", "refused"))
	if !decided || v.admitted() || v.stage != schema.StageGuard || v.why != "not this task" {
		t.Errorf("guard refuses: verdict %+v decided %v, want refused at guard", v, decided)
	}
	if n := len(log.all()); n != 0 {
		t.Errorf("admitEarly wrote %d events, want none", n)
	}
}

func TestStageRecord(t *testing.T) {
	r, log, _ := stageRuntime(t, nil)
	ctx := context.Background()
	c := identified(t, r, "probe", "t1")
	if err := r.holdStop(c); err != nil {
		t.Fatal(err)
	}
	if err := r.record(ctx, c, true); err != nil {
		t.Fatal(err)
	}
	evs := log.all()
	if len(evs) != 1 || evs[0].Type != schema.TypeCall {
		t.Fatalf("events %+v, want one tool.call", evs)
	}
	got := evs[0].Call
	if !got.Started || got.StartMarker || got.CallID != c.callID || got.Operation.Key != c.op.Key || c.res.CallSeq != evs[0].Seq {
		t.Errorf("tool.call %+v (result seq %d): want started, the call's ids, its seq on the result", got, c.res.CallSeq)
	}
	if c.stop.held {
		t.Error("stop lock still held after the tool.call was recorded")
	}

	// Not started: a start marker. A failed append leaves the stop lock
	// to the caller's deferred release.
	c = identified(t, r, "probe", "t1")
	if err := r.record(ctx, c, false); err != nil || !log.all()[1].Call.StartMarker {
		t.Errorf("unstarted tool.call: err %v, want a start marker", err)
	}
	log.err = errors.New("log down")
	c = identified(t, r, "probe", "t1")
	if err := r.holdStop(c); err != nil {
		t.Fatal(err)
	}
	if err := r.record(ctx, c, false); codeOf(err) != schema.CodeLog {
		t.Errorf("append failed: %v, want log_unavailable", err)
	}
	if !c.stop.held || c.res.CallSeq != 0 {
		t.Errorf("a tool.call not recorded released the stop lock (%v) or set a seq (%d)", !c.stop.held, c.res.CallSeq)
	}
	c.stop.release()
}

func TestStageRecordThenAdmit(t *testing.T) {
	guard := HookFunc(func(_ context.Context, a Admission) error {
		if a.Operation.Task == "refused" {
			return errors.New("not this task")
		}
		return nil
	})
	r, log, runs := stageRuntime(t, func(c *Config) { c.Guard = guard })
	ctx := context.Background()

	res, err := r.recordThenAdmit(ctx, identified(t, r, "probe", "refused"))
	if codeOf(err) != schema.CodeRejected || res.Stage != schema.StageGuard || runs.Load() != 0 {
		t.Errorf("guard refuses: %+v %v (body runs %d), want rejected at guard, no run", res, err, runs.Load())
	}
	res, err = r.recordThenAdmit(ctx, identified(t, r, "probe", "ok"))
	if err != nil || res.Status != schema.StatusOK || runs.Load() != 1 {
		t.Errorf("admitted: %+v %v (body runs %d), want ok after one run", res, err, runs.Load())
	}
	var types []string
	for _, ev := range log.all() {
		types = append(types, ev.Type)
	}
	want := "tool.call,tool.result,tool.call,tool.started,tool.result"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("log %s, want %s (the three-event form)", got, want)
	}
}
