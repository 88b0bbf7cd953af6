package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// memLog is an in-memory session log. failOn makes the append of that event
// type fail with err.
type memLog struct {
	mu     sync.Mutex
	events []schema.Event
	failOn string
	err    error
}

func (l *memLog) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, err // like a real log: a write under an ended context fails
	}
	if l.failOn == ev.Type || l.failOn == "*" {
		return 0, l.err
	}
	ev.Seq = uint64(len(l.events) + 1)
	l.events = append(l.events, ev)
	return ev.Seq, nil
}

func (l *memLog) all() []schema.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]schema.Event(nil), l.events...)
}

func (l *memLog) types() string {
	var ts []string
	for _, e := range l.all() {
		ts = append(ts, e.Type)
	}
	return strings.Join(ts, ",")
}

// memCounter is an in-memory budget counter.
type memCounter struct {
	mu sync.Mutex
	m  map[string]stream.Usage
}

func (c *memCounter) Add(_ context.Context, session, task string, limit int64) (stream.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]stream.Usage{}
	}
	u, ok := c.m[session+"."+task]
	if !ok {
		u.Limit = limit
	}
	u.ToolCalls++
	c.m[session+"."+task] = u
	return u, nil
}

func (c *memCounter) get(session, task string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[session+"."+task].ToolCalls
}

// noPlans is a plan store with no plans in it.
type noPlans struct{}

func (noPlans) Get(_ context.Context, id string) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, fmt.Errorf("%w: %s", stream.ErrPlanNotIssued, id)
}
func (noPlans) Consume(context.Context, stream.PlanRecord, string, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
func (noPlans) Complete(context.Context, stream.PlanRecord, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}

type fixture struct {
	rt     *worker.Runtime
	log    *memLog
	budget *memCounter
	runs   atomic.Int32 // body runs of the "probe" tool
}

// setup builds a runtime on in-memory fakes with one tool "probe" whose body
// is body (counted in runs), plus changes to the config.
func setup(t *testing.T, tool worker.Tool, mod func(*worker.Config)) *fixture {
	t.Helper()
	f := &fixture{log: &memLog{}, budget: &memCounter{}}
	body := tool.Body
	tool.Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		f.runs.Add(1)
		return body(ctx, req)
	}
	if tool.Metadata.Name == "" {
		tool.Metadata = effect.Metadata{Name: "probe"}.WithEffect(effect.Idempotent, "probe-v1")
	}
	reg, err := worker.NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Session: "s-1", Log: f.log, Registry: reg, Plans: noPlans{}, Budget: f.budget}
	if mod != nil {
		mod(&cfg)
	}
	if f.rt, err = worker.New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

func okBody() worker.Body {
	return func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	}
}

func TestCallStatuses(t *testing.T) {
	blockUntilDone := func(ctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	tests := []struct {
		name          string
		body          worker.Body
		timeout       time.Duration
		outputLimit   int
		cancelOnStart bool
		wantStatus    schema.Status
		wantRetryable bool
		wantOutput    string
		wantErrSub    string
	}{
		{name: "ok", body: okBody(), wantStatus: schema.StatusOK, wantOutput: `{"ok":true}`},
		{name: "ok without output", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil }, wantStatus: schema.StatusOK},
		{name: "failed", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, errors.New("boom") },
			wantStatus: schema.StatusFailed, wantErrSub: "boom"},
		{name: "failed retryable", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return nil, worker.Retryable(errors.New("flaky"))
		}, wantStatus: schema.StatusFailed, wantRetryable: true, wantErrSub: "flaky"},
		{name: "panic is failed", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) { panic("oops") },
			wantStatus: schema.StatusFailed, wantErrSub: "panicked: oops"},
		{name: "invalid output is failed", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return json.RawMessage(`{nope`), nil
		}, wantStatus: schema.StatusFailed, wantErrSub: "not valid JSON"},
		{name: "timeout", body: blockUntilDone, timeout: 20 * time.Millisecond, wantStatus: schema.StatusTimeout, wantRetryable: true},
		{name: "timeout of a body ignoring ctx", body: func(ctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
			select {} // never returns; the runtime must not wait for it
		}, timeout: 20 * time.Millisecond, wantStatus: schema.StatusTimeout, wantRetryable: true},
		{name: "cancelled", body: blockUntilDone, cancelOnStart: true, wantStatus: schema.StatusCancelled, wantRetryable: true},
		{name: "budget exhausted", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return nil, worker.BudgetExhausted(errors.New("quota spent"))
		}, wantStatus: schema.StatusBudgetExhausted, wantErrSub: "quota spent"},
		{name: "output limit", body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", 64) + `"`), nil
		}, outputLimit: 16, wantStatus: schema.StatusOutputLimit, wantErrSub: "over the limit of 16 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := tt.body
			if tt.cancelOnStart {
				inner := body
				body = func(bctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
					cancel() // the caller goes away while the body runs
					return inner(bctx, req)
				}
			}
			f := setup(t, worker.Tool{Body: body, Timeout: tt.timeout, OutputLimit: tt.outputLimit}, nil)
			res, err := f.rt.Call(ctx, "probe", json.RawMessage(`{"n":1}`))
			if res.Status != tt.wantStatus {
				t.Fatalf("status %q (err %v), want %q", res.Status, err, tt.wantStatus)
			}
			if tt.wantStatus == schema.StatusOK {
				if err != nil {
					t.Fatalf("ok call returned %v", err)
				}
			} else if schema.CodeOf(err) != schema.Code(tt.wantStatus) {
				t.Fatalf("error %v, want code %s", err, tt.wantStatus)
			}
			if f.runs.Load() != 1 {
				t.Fatalf("body ran %d times", f.runs.Load())
			}
			if got := f.log.types(); got != "tool.call,tool.started,tool.result" {
				t.Fatalf("events %s", got)
			}
			evs := f.log.all()
			call, result := evs[0].Call, evs[2].Result
			if !call.StartMarker || call.Operation == nil || call.Operation.Task != worker.DefaultTask ||
				!strings.HasPrefix(call.Operation.Key, "op-") || call.Operation.Contract.Revision != "probe-v1" {
				t.Fatalf("tool.call %+v op %+v", call, call.Operation)
			}
			if result.CallID != call.CallID || evs[1].Started.CallID != call.CallID || res.CallID != call.CallID {
				t.Fatalf("call ids differ: %+v", evs)
			}
			if result.Status != tt.wantStatus || result.Retryable != tt.wantRetryable || result.Stage != "" {
				t.Fatalf("tool.result %+v", result)
			}
			if string(result.Output) != tt.wantOutput || string(res.Output) != tt.wantOutput {
				t.Fatalf("output %s / %s, want %s", result.Output, res.Output, tt.wantOutput)
			}
			if !strings.Contains(result.Error, tt.wantErrSub) {
				t.Fatalf("error text %q, want %q in it", result.Error, tt.wantErrSub)
			}
			if n := f.budget.get("s-1", worker.DefaultTask); n != 1 {
				t.Fatalf("tool_calls %d, want 1", n)
			}
		})
	}
}

func deny(msg string) worker.Hook {
	return worker.HookFunc(func(context.Context, worker.Admission) error { return errors.New(msg) })
}

func TestCallRejections(t *testing.T) {
	schemaDoc := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	tests := []struct {
		name      string
		mod       func(*worker.Config)
		args      string
		wantStage schema.Stage
		wantSub   string
	}{
		{"permission", func(c *worker.Config) { c.Permission = deny("not allowed") }, `{"n":1}`, schema.StagePermission, "not allowed"},
		{"arguments", nil, `{"n":"one"}`, schema.StageArguments, "input schema"},
		{"arguments missing field", nil, `{}`, schema.StageArguments, "input schema"},
		{"guard", func(c *worker.Config) { c.Guard = deny("looks dangerous") }, `{"n":1}`, schema.StageGuard, "looks dangerous"},
		{"approval", func(c *worker.Config) { c.Approval = deny("operator said no") }, `{"n":1}`, schema.StageApproval, "operator said no"},
		{"budget", func(c *worker.Config) { c.BudgetLimit = 0 }, `{"n":1}`, schema.StageBudget, "over the limit 1"},
		// order: permission runs before arguments, approval before budget
		{"permission before arguments", func(c *worker.Config) { c.Permission = deny("nope") }, `{"n":"x"}`, schema.StagePermission, "nope"},
		{"approval before budget", func(c *worker.Config) { c.Approval = deny("wait") }, `{"n":1}`, schema.StageApproval, "wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, worker.Tool{Body: okBody(), InputSchema: schemaDoc}, tt.mod)
			if tt.wantStage == schema.StageBudget || tt.name == "approval before budget" {
				// Exhaust a limit of 1 with one accepted call first.
				f.budget.Add(context.Background(), "s-1", worker.DefaultTask, 1)
			}
			res, err := f.rt.Call(context.Background(), "probe", json.RawMessage(tt.args))
			var werr *schema.Error
			if !errors.As(err, &werr) || werr.Code != schema.CodeRejected || werr.Stage != tt.wantStage || !errors.Is(err, schema.ErrRejected) {
				t.Fatalf("error %v, want rejected at %s", err, tt.wantStage)
			}
			if res.Status != schema.StatusRejected || res.Stage != tt.wantStage || !strings.Contains(res.Error, tt.wantSub) {
				t.Fatalf("result %+v", res)
			}
			if f.runs.Load() != 0 {
				t.Fatal("body ran for a rejected call")
			}
			if got := f.log.types(); got != "tool.call,tool.result" {
				t.Fatalf("events %s", got)
			}
			r := f.log.all()[1].Result
			if r.Status != schema.StatusRejected || r.Stage != tt.wantStage {
				t.Fatalf("tool.result %+v", r)
			}
		})
	}
}

func TestHooksSeeTheCall(t *testing.T) {
	var seen []worker.Admission
	var mu sync.Mutex
	record := worker.HookFunc(func(_ context.Context, a worker.Admission) error {
		mu.Lock()
		seen = append(seen, a)
		mu.Unlock()
		return nil
	})
	f := setup(t, worker.Tool{Body: okBody()}, func(c *worker.Config) { c.Permission, c.Guard, c.Approval = record, record, record })
	res, err := f.rt.CallWithOptions(context.Background(), "probe", json.RawMessage(`{"a":1}`),
		worker.CallOptions{Task: "t-9", RequestID: "r-1", ProviderCallID: "toolu_1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("hooks ran %d times, want 3", len(seen))
	}
	a := seen[2]
	if a.CallID != res.CallID || a.Operation.Task != "t-9" || a.Operation.Key != res.Operation.Key || a.RequestID != "r-1" || a.ProviderCallID != "toolu_1" || string(a.Arguments) != `{"a":1}` {
		t.Fatalf("admission %+v", a)
	}
	call := f.log.all()[0].Call
	if call.RequestID != "r-1" || call.ProviderCallID != "toolu_1" {
		t.Fatalf("tool.call %+v", call)
	}
}

func TestBodySeesOperation(t *testing.T) {
	got := make(chan worker.BodyRequest, 2)
	f := setup(t, worker.Tool{Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		got <- req
		return nil, nil
	}}, nil)
	r1, err := f.rt.CallWithOptions(context.Background(), "probe", nil, worker.CallOptions{Task: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := f.rt.CallWithOptions(context.Background(), "probe", nil, worker.CallOptions{Task: "t-1"})
	q1, q2 := <-got, <-got
	if q1.CallID != r1.CallID || q1.Session != "s-1" || q1.Tool != "probe" || string(q1.Arguments) != `{}` {
		t.Fatalf("request %+v", q1)
	}
	if q1.Operation.Task != "t-1" || q1.Operation.Key != r1.Operation.Key || q1.Operation.Contract.Effect != effect.Idempotent {
		t.Fatalf("operation %+v", q1.Operation)
	}
	// Two new logical actions never share a key or a call id.
	if q1.Operation.Key == q2.Operation.Key || r1.CallID == r2.CallID {
		t.Fatalf("keys or call ids repeat: %+v %+v", q1, q2)
	}
}

func TestCallRefusedBeforeRecording(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args string
		opts worker.CallOptions
		want *schema.Error
	}{
		{"unknown tool", "nope", `{}`, worker.CallOptions{}, schema.ErrUnknownTool},
		{"arguments not JSON", "probe", `{"a":`, worker.CallOptions{}, schema.ErrInvalidCall},
		{"task not a token", "probe", `{}`, worker.CallOptions{Task: "a.b"}, schema.ErrInvalidCall},
		{"request id too long", "probe", `{}`, worker.CallOptions{RequestID: strings.Repeat("r", 1025)}, schema.ErrInvalidCall},
		{"plan not issued", "probe", `{}`, worker.CallOptions{Retry: &schema.Plan{PlanID: "p-x", Task: "t-1"}}, schema.ErrPlanNotIssued},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, worker.Tool{Body: okBody()}, nil)
			_, err := f.rt.CallWithOptions(context.Background(), tt.tool, json.RawMessage(tt.args), tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if n := len(f.log.all()); n != 0 || f.runs.Load() != 0 || f.budget.get("s-1", worker.DefaultTask) != 0 {
				t.Fatalf("%d events, %d runs recorded for a refused call", n, f.runs.Load())
			}
		})
	}
}

func TestFencedRuntimeStops(t *testing.T) {
	f := setup(t, worker.Tool{Body: okBody()}, nil)
	f.log.failOn, f.log.err = schema.TypeCall, fmt.Errorf("append: %w", stream.ErrFenced)
	_, err := f.rt.Call(context.Background(), "probe", nil)
	if !errors.Is(err, schema.ErrFenced) || !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("error %v, want fenced", err)
	}
	f.log.failOn = "" // even if the log would take it, a fenced runtime never writes again
	if _, err := f.rt.Call(context.Background(), "probe", nil); !errors.Is(err, schema.ErrFenced) {
		t.Fatalf("second call: %v", err)
	}
	if len(f.log.all()) != 0 || f.runs.Load() != 0 {
		t.Fatal("fenced runtime wrote or ran")
	}
}

// TestNoBodyWithoutStarted: when tool.started is not acknowledged the body
// never runs, and the call stays open with its start marker.
func TestNoBodyWithoutStarted(t *testing.T) {
	f := setup(t, worker.Tool{Body: okBody()}, nil)
	f.log.failOn, f.log.err = schema.TypeStarted, errors.New("nats: timeout")
	_, err := f.rt.Call(context.Background(), "probe", nil)
	if !errors.Is(err, schema.ErrLog) {
		t.Fatalf("error %v, want log_unavailable", err)
	}
	if f.runs.Load() != 0 {
		t.Fatal("body ran without an acknowledged tool.started")
	}
	if got := f.log.types(); got != "tool.call" {
		t.Fatalf("events %s", got)
	}
}

// TestCallerGoneBeforeStart: a caller that cancels before the body starts is
// refused at the stage that noticed; the body never runs.
func TestCallerGoneBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := setup(t, worker.Tool{Body: okBody()}, func(c *worker.Config) {
		c.Guard = worker.HookFunc(func(context.Context, worker.Admission) error { cancel(); return nil })
	})
	res, err := f.rt.Call(ctx, "probe", nil)
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageApproval {
		t.Fatalf("result %+v, err %v: want rejected at approval", res, err)
	}
	if f.runs.Load() != 0 {
		t.Fatal("body ran")
	}
	if got := f.log.types(); got != "tool.call,tool.result" {
		t.Fatalf("events %s", got)
	}
}

func TestConfigValidation(t *testing.T) {
	reg, _ := worker.NewRegistry()
	good := worker.Config{Session: "s-1", Log: &memLog{}, Registry: reg, Plans: noPlans{}, Budget: &memCounter{}}
	tests := []struct {
		name  string
		mod   func(*worker.Config)
		field string
	}{
		{"session", func(c *worker.Config) { c.Session = "a b" }, "Session"},
		{"log", func(c *worker.Config) { c.Log = nil }, "Log"},
		{"registry", func(c *worker.Config) { c.Registry = nil }, "Registry"},
		{"plans", func(c *worker.Config) { c.Plans = nil }, "Plans"},
		{"budget", func(c *worker.Config) { c.Budget = nil }, "Budget"},
		{"budget limit", func(c *worker.Config) { c.BudgetLimit = -1 }, "BudgetLimit"},
		{"default task", func(c *worker.Config) { c.DefaultTask = "x.y" }, "DefaultTask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			_, err := worker.New(c)
			if !errors.Is(err, worker.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %v, want ErrInvalidConfig naming %s", err, tt.field)
			}
		})
	}
	if _, err := worker.New(good); err != nil {
		t.Fatal(err)
	}
}

func TestRegistry(t *testing.T) {
	meta := effect.Metadata{Name: "a"}.WithEffect(effect.ReadOnly, "a-v1")
	body := okBody()
	tests := []struct {
		name string
		tool worker.Tool
		want error
	}{
		{"valid", worker.Tool{Metadata: meta, Body: body}, nil},
		{"no name", worker.Tool{Metadata: effect.Metadata{}.WithEffect(effect.ReadOnly, "v"), Body: body}, worker.ErrInvalidTool},
		{"no body", worker.Tool{Metadata: meta}, worker.ErrInvalidTool},
		{"no revision", worker.Tool{Metadata: effect.Metadata{Name: "a"}, Body: body}, worker.ErrInvalidTool},
		{"bad schema", worker.Tool{Metadata: meta, Body: body, InputSchema: json.RawMessage(`{"type":12}`)}, worker.ErrInvalidTool},
		{"schema not JSON", worker.Tool{Metadata: meta, Body: body, InputSchema: json.RawMessage(`{`)}, worker.ErrInvalidTool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r worker.Registry
			if err := r.Register(tt.tool); !errors.Is(err, tt.want) {
				t.Fatalf("Register: %v, want %v", err, tt.want)
			}
		})
	}
	r, err := worker.NewRegistry(worker.Tool{Metadata: meta, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(worker.Tool{Metadata: meta, Body: body}); !errors.Is(err, worker.ErrDuplicateTool) {
		t.Fatalf("duplicate: %v", err)
	}
	if tl, ok := r.Lookup("a"); !ok || tl.Metadata.Contract.Revision != "a-v1" {
		t.Fatalf("Lookup: %+v %v", tl, ok)
	}
	if names := r.Names(); len(names) != 1 || names[0] != "a" {
		t.Fatalf("Names %v", names)
	}
}

// TestResultRecordedAfterLongBody: the tool.result is written under a fresh
// write timeout, however long the body ran.
func TestResultRecordedAfterLongBody(t *testing.T) {
	f := setup(t, worker.Tool{Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		<-time.After(60 * time.Millisecond) // work that outlasts WriteTimeout
		return json.RawMessage(`1`), nil
	}}, func(c *worker.Config) { c.WriteTimeout = 20 * time.Millisecond })
	res, err := f.rt.Call(context.Background(), "probe", nil)
	if err != nil || res.Status != schema.StatusOK {
		t.Fatalf("result %+v, err %v", res, err)
	}
	if got := f.log.types(); got != "tool.call,tool.started,tool.result" {
		t.Fatalf("events %s", got)
	}
}
