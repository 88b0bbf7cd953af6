package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
)

// scrape serves reg over HTTP the way --metrics does and returns every
// sample of the text exposition as "name{l1="v1",…}" → value, labels in
// name order (histograms as _count and _sum).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := name
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+strings.TrimPrefix(key, name)] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+strings.TrimPrefix(key, name)] = m.GetHistogram().GetSampleSum()
			case m.Untyped != nil:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

func tool(name string, e effect.Effect, body worker.Body, mod func(*worker.Tool)) worker.Tool {
	tl := worker.Tool{Metadata: effect.Metadata{Name: name}.WithEffect(e, name+"-v1"), Body: body}
	if mod != nil {
		mod(&tl)
	}
	return tl
}

// TestRuntimeEveryStatus runs calls of every result status through a real
// runtime on an embedded server with the metrics observer, scrapes
// /metrics over HTTP and checks each counter against what happened.
func TestRuntimeEveryStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, topo := streamtest.Start(t)
	reg := metrics.NewRegistry()
	obs := metrics.NewRuntime(reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- metrics.Serve(sctx, ln, reg) }()
	defer func() {
		scancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/metrics"

	started := make(chan struct{})
	ok := func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	}
	reg2, err := worker.NewRegistry(
		tool("t.ok", effect.ReadOnly, ok, nil),
		tool("t.fail", effect.Idempotent, func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return nil, errors.New("boom")
		}, nil),
		tool("t.slow", effect.Idempotent, func(ctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, func(tl *worker.Tool) { tl.Timeout = 20 * time.Millisecond }),
		tool("t.wait", effect.Idempotent, func(ctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}, nil),
		tool("t.big", effect.ReadOnly, func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", 100) + `"`), nil
		}, func(tl *worker.Tool) { tl.OutputLimit = 10 }),
		tool("t.broke", effect.Idempotent, func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return nil, worker.BudgetExhausted(errors.New("quota"))
		}, nil),
		tool("t.typed", effect.ReadOnly, ok, func(tl *worker.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","required":["sku"]}`)
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := topo.Leases().AcquireLease(ctx, "m-1", "me")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().Fence(ctx, "m-1", "me", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{
		Session: "m-1", Log: lg, Registry: reg2, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget),
		Observer: obs,
		Permission: worker.HookFunc(func(_ context.Context, a worker.Admission) error {
			if strings.Contains(string(a.Arguments), "forbidden") {
				return errors.New("not for you")
			}
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool, args string) {
		_, _ = rt.Call(ctx, tool, json.RawMessage(args))
	}
	call("t.ok", `{}`)
	call("t.ok", `{"n":2}`)
	call("t.fail", `{}`)
	call("t.slow", `{}`)
	call("t.big", `{}`)
	call("t.broke", `{}`)
	call("t.typed", `{}`)                    // rejected: arguments
	call("t.ok", `{"x":"forbidden"}`)        // rejected: permission
	cctx, ccancel := context.WithCancel(ctx) // cancelled while the body runs
	go func() {
		<-started
		ccancel()
	}()
	_, _ = rt.Call(cctx, "t.wait", json.RawMessage(`{}`))

	h, err := topo.Logs().Load(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	tools := map[string]string{}
	appends := 0
	for _, ev := range h {
		if ev.Type != schema.TypeFenced {
			appends++
		}
		switch {
		case ev.Call != nil:
			tools[ev.Call.CallID] = ev.Call.Tool
		case ev.Result != nil:
			want[`jingwei_tool_calls_total{status="`+string(ev.Result.Status)+`",tool="`+tools[ev.Result.CallID]+`"}`]++
			if ev.Result.Status == schema.StatusRejected {
				want[`jingwei_admission_rejections_total{stage="`+string(ev.Result.Stage)+`"}`]++
			}
		}
	}
	statuses := map[schema.Status]bool{}
	for _, ev := range h {
		if ev.Result != nil {
			statuses[ev.Result.Status] = true
		}
	}
	for _, st := range []schema.Status{schema.StatusOK, schema.StatusFailed, schema.StatusTimeout, schema.StatusCancelled, schema.StatusRejected, schema.StatusBudgetExhausted, schema.StatusOutputLimit} {
		if !statuses[st] {
			t.Fatalf("the script recorded no %s result: %v", st, statuses)
		}
	}
	got := scrape(t, url)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got[`jingwei_admission_rejections_total{stage="arguments"}`] != 1 || got[`jingwei_admission_rejections_total{stage="permission"}`] != 1 {
		t.Errorf("rejections by stage: arguments %v, permission %v; want 1 and 1", got[`jingwei_admission_rejections_total{stage="arguments"}`], got[`jingwei_admission_rejections_total{stage="permission"}`])
	}
	var n float64
	for _, typ := range []string{schema.TypeCall, schema.TypeStarted, schema.TypeResult} {
		n += got[`jingwei_log_append_seconds_count{type="`+typ+`"}`]
	}
	if int(n) != appends {
		t.Errorf("append latency observed %v times, want %d (every event the runtime appended)", n, appends)
	}
	if got["go_goroutines"] == 0 {
		t.Error("the Go runtime's metrics are missing")
	}

	// A fenced log: the failed appends are counted by code, not timed.
	if _, err := topo.Logs().Fence(ctx, "m-1", "other", lease.Epoch+1); err != nil {
		t.Fatal(err)
	}
	call("t.ok", `{"after":"fence"}`)
	if got := scrape(t, url); got[`jingwei_log_append_errors_total{code="fenced",type="tool.call"}`] != 1 {
		t.Errorf("append errors after a fence: %v", got)
	}
}

// TestToolLabelBounded: an agent naming ever new tools does not grow the
// tool label beyond MaxToolLabels.
func TestToolLabelBounded(t *testing.T) {
	reg := metrics.NewRegistry()
	obs := metrics.NewRuntime(reg)
	for i := range metrics.MaxToolLabels + 50 {
		id := "c-" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + "-" + time.Duration(i).String()
		obs.Appended(schema.Event{Session: "s", Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "tool-" + id}}, time.Millisecond, nil)
		obs.Appended(schema.Event{Session: "s", Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusRejected, Stage: schema.StageArguments}}, time.Millisecond, nil)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "jingwei_tool_calls_total" && len(f.GetMetric()) > metrics.MaxToolLabels+1 {
			t.Fatalf("%d tool label values, want at most %d + other", len(f.GetMetric()), metrics.MaxToolLabels)
		}
	}
}

// fakeRecoverer is a RecoverySource with a fixed answer.
type fakeRecoverer struct {
	st  service.Status
	err error
}

func (f *fakeRecoverer) Status(context.Context, string) (service.Status, error) { return f.st, f.err }
func (f *fakeRecoverer) ConsumerLag(context.Context) (uint64, uint64, error) {
	return 7, 2, f.err
}

// TestRecoveryGauges: the state gauges follow the recoverer's status at
// each scrape; the oldest wait is measured from the first needs_review
// assessment; a recoverer that cannot answer reads as recoverer_up 0.
func TestRecoveryGauges(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.NewRecovery(reg)
	a := schema.Assessment{Session: "s", CallID: "c-1", Outcome: schema.OutcomeUncertain, Decision: schema.DecisionNeedsReview}
	m.Assessed(a)
	m.Assessed(a) // published again (classifier and takeover): counted once
	src := &fakeRecoverer{st: service.Status{AwaitingReview: []schema.Assessment{a}, Plans: service.PlanCounts{Issued: 1, Consumed: 3}, Stats: service.Stats{OpenCalls: 2, EventsSeen: 9},
		AwaitingApproval: []service.WaitingApproval{{Session: "s", CallID: "c-2"}, {Session: "s", CallID: "c-3"}},
		StoppedTasks:     []service.StoppedTask{{Session: "s", Task: "t-9", By: "budget"}}}}
	m.Source(src)
	m.TookOver("s", []schema.Event{{Type: schema.TypeCall, At: time.Now().Add(-3 * time.Second), Call: &schema.Call{CallID: "c-1"}}}, []schema.Assessment{a})

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = metrics.Serve(ctx, ln, reg) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	got := scrape(t, url)
	for k, v := range map[string]float64{
		"jingwei_calls_awaiting_review": 1, `jingwei_plans{state="issued"}`: 1, `jingwei_plans{state="consumed"}`: 3,
		"jingwei_open_calls": 2, "jingwei_recoverer_events_seen_total": 9, "jingwei_recoverer_consumer_pending_events": 7,
		"jingwei_recoverer_consumer_ack_pending_events": 2, "jingwei_recoverer_up": 1, "jingwei_takeovers_total": 1,
		"jingwei_approvals_pending": 2, "jingwei_tasks_stopped": 1,
		`jingwei_assessments_total{decision="needs_review",outcome="uncertain"}`: 1, "jingwei_crash_to_assessment_seconds_count": 1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if s := got["jingwei_crash_to_assessment_seconds_sum"]; s < 3 || s > 60 {
		t.Errorf("crash to assessment %vs, want about 3s", s)
	}
	if w := got["jingwei_review_wait_oldest_seconds"]; w < 0 || w > 60 {
		t.Errorf("oldest wait %v", w)
	}
	// Reviewed and planned: no call waits any more.
	src.st.AwaitingReview = nil
	src.st.AwaitingApproval = src.st.AwaitingApproval[1:] // one answered
	if got := scrape(t, url); got["jingwei_calls_awaiting_review"] != 0 || got["jingwei_review_wait_oldest_seconds"] != 0 || got["jingwei_approvals_pending"] != 1 {
		t.Errorf("after the review and one answer: awaiting %v, oldest %v, approvals pending %v; want 0, 0, 1",
			got["jingwei_calls_awaiting_review"], got["jingwei_review_wait_oldest_seconds"], got["jingwei_approvals_pending"])
	}
	src.err = errors.New("down")
	if got := scrape(t, url); got["jingwei_recoverer_up"] != 0 {
		t.Errorf("recoverer_up %v with a recoverer that does not answer, want 0", got["jingwei_recoverer_up"])
	}
}

// TestConsoleCounters: the console's counters count what it signed and
// asked for, with bounded labels (an unknown verdict or decision is
// "other"), and a nil *Console counts nothing.
func TestConsoleCounters(t *testing.T) {
	reg := metrics.NewRegistry()
	c := metrics.NewConsole(reg)
	c.Reviewed(schema.VerdictCompleted, "accepted")
	c.Reviewed("bogus", "refused")
	c.Prepared("")
	c.Prepared(schema.CodeNeedsReview)
	c.Answered(schema.Approved, "honoured")
	c.Answered(schema.Denied, "honoured")
	c.Answered(schema.Approved, "unanswered")
	c.Answered("<script>", "refused")
	var none *metrics.Console
	none.Reviewed(schema.VerdictCompleted, "accepted")
	none.Answered(schema.Approved, "honoured")

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = metrics.Serve(ctx, ln, reg) }()
	got := scrape(t, "http://"+ln.Addr().String()+"/metrics")
	for k, v := range map[string]float64{
		`jingwei_console_reviews_total{result="accepted",verdict="completed"}`:     1,
		`jingwei_console_reviews_total{result="refused",verdict="other"}`:          1,
		`jingwei_console_plan_requests_total{result="issued"}`:                     1,
		`jingwei_console_plan_requests_total{result="needs_review"}`:               1,
		`jingwei_console_approvals_total{decision="approved",result="honoured"}`:   1,
		`jingwei_console_approvals_total{decision="denied",result="honoured"}`:     1,
		`jingwei_console_approvals_total{decision="approved",result="unanswered"}`: 1,
		`jingwei_console_approvals_total{decision="other",result="refused"}`:       1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// replacedRecoverer is a fakeRecoverer that also says which protected
// streams were replaced.
type replacedRecoverer struct {
	fakeRecoverer
	replaced []stream.IdentityProblem
}

func (r *replacedRecoverer) ProtectedStreams() []string { return stream.ProtectedStreams("") }
func (r *replacedRecoverer) ReplacedStreams() []stream.IdentityProblem {
	return r.replaced
}

// TestStreamReplacedGauge: jingwei_stream_replaced is 1 for each
// protected stream the recoverer found replaced, 0 for the others, and
// back to 0 once confirmed.
func TestStreamReplacedGauge(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.NewRecovery(reg)
	src := &replacedRecoverer{replaced: []stream.IdentityProblem{{Stream: "JW_REVIEWS", Reason: "deleted and created again"}}}
	m.Source(src)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = metrics.Serve(ctx, ln, reg) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	got := scrape(t, url)
	if v, ok := got[`jingwei_stream_replaced{stream="JW_REVIEWS"}`]; !ok || v != 1 {
		t.Errorf("jingwei_stream_replaced{JW_REVIEWS} = %v (present %v), want 1", v, ok)
	}
	if v, ok := got[`jingwei_stream_replaced{stream="JW_EVENTS"}`]; !ok || v != 0 {
		t.Errorf("jingwei_stream_replaced{JW_EVENTS} = %v (present %v), want 0", v, ok)
	}
	src.replaced = nil
	if got := scrape(t, url); got[`jingwei_stream_replaced{stream="JW_REVIEWS"}`] != 0 {
		t.Errorf("after the confirmation: jingwei_stream_replaced{JW_REVIEWS} = %v, want 0", got[`jingwei_stream_replaced{stream="JW_REVIEWS"}`])
	}
}

// TestOpenCallOldest: the oldest open call's age is measured from its
// tool.call's timestamp; a call waiting for approval (it may wait for
// days by design) and a call stamped in the future (another host's
// clock) do not count; no open call reads 0.
func TestOpenCallOldest(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.NewRecovery(reg)
	now := time.Now()
	src := &fakeRecoverer{st: service.Status{
		OpenCalls: []service.OpenCall{
			{Session: "s", CallID: "c-parked", At: now.Add(-time.Hour)},
			{Session: "s", CallID: "c-stuck", At: now.Add(-90 * time.Second)},
			{Session: "t", CallID: "c-running", At: now.Add(-10 * time.Second)},
			{Session: "t", CallID: "c-ahead", At: now.Add(time.Minute)},
		},
		AwaitingApproval: []service.WaitingApproval{{Session: "s", CallID: "c-parked"}},
	}}
	m.Source(src)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = metrics.Serve(ctx, ln, reg) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	if v := scrape(t, url)["jingwei_open_call_oldest_seconds"]; v < 90 || v > 150 {
		t.Errorf("oldest open call %vs, want about 90 s (the parked call and the future stamp skipped)", v)
	}
	src.st.OpenCalls = src.st.OpenCalls[:1] // only the parked call is left open
	if v, ok := scrape(t, url)["jingwei_open_call_oldest_seconds"]; !ok || v != 0 {
		t.Errorf("with only a call waiting for approval open: %v (present %v), want 0", v, ok)
	}
}
