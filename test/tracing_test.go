package test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// traced turns jingwei's tracing on for the test, into an in-memory
// exporter, and returns the exporter and a tracer standing for the agent.
func traced(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Use(tp)
	t.Cleanup(func() { tracing.Use(nil); _ = tp.Shutdown(context.Background()) })
	return exp, tp.Tracer("agent")
}

// spanSet is what the exporter holds, with lookups.
type spanSet []tracetest.SpanStub

func (s spanSet) named(name string, attrs ...attribute.KeyValue) []tracetest.SpanStub {
	var out []tracetest.SpanStub
next:
	for _, sp := range s {
		if sp.Name != name {
			continue
		}
		for _, want := range attrs {
			found := false
			for _, a := range sp.Attributes {
				if a.Key == want.Key && a.Value == want.Value {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		out = append(out, sp)
	}
	return out
}

func (s spanSet) one(t *testing.T, name string, attrs ...attribute.KeyValue) tracetest.SpanStub {
	t.Helper()
	got := s.named(name, attrs...)
	if len(got) == 0 {
		t.Fatalf("no span %s %v among %d spans: %v", name, attrs, len(s), s.names())
	}
	return got[0]
}

func (s spanSet) names() []string {
	var out []string
	for _, sp := range s {
		out = append(out, sp.Name)
	}
	return out
}

// byID returns the span with id.
func (s spanSet) byID(id trace.SpanID) (tracetest.SpanStub, bool) {
	for _, sp := range s {
		if sp.SpanContext.SpanID() == id {
			return sp, true
		}
	}
	return tracetest.SpanStub{}, false
}

// linksTo reports whether sp links to a span of trace tid, with kind.
func linksTo(sp tracetest.SpanStub, tid trace.TraceID, kind string) bool {
	for _, l := range sp.Links {
		if l.SpanContext.TraceID() != tid {
			continue
		}
		for _, a := range l.Attributes {
			if a.Key == tracing.AttrLinkKind && a.Value.AsString() == kind {
				return true
			}
		}
	}
	return false
}

// ancestorIn reports whether sp has an ancestor named name in s.
func (s spanSet) ancestorIn(sp tracetest.SpanStub, name string) bool {
	for p := sp.Parent; p.IsValid(); {
		ps, ok := s.byID(p.SpanID())
		if !ok {
			return false
		}
		if ps.Name == name {
			return true
		}
		p = ps.Parent
	}
	return false
}

// crashable starts a tool worker on a connection of its own and returns
// its crash: the connection closed and the worker stopped, nothing
// drained or released (what a SIGKILL leaves: the lease to expire).
func crashable(t *testing.T, emb *natsnode.Embedded, topo *stream.Topology, cfg toolworker.Config) (crash func()) {
	t.Helper()
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	tp, err := stream.OpenTopology(context.Background(), js, topo.Config())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Topology = tp
	w, err := toolworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { nc.Close(); cancel() }
}

// runWorker runs a tool worker on topo until the test ends.
func runWorker(t *testing.T, cfg toolworker.Config) {
	t.Helper()
	w, err := toolworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// agentRequest publishes a tool request on jw.requests.<session> as an
// agent does, with its own span's traceparent header, and returns the
// agent span's trace id.
func agentRequest(t *testing.T, tr trace.Tracer, topo *stream.Topology, q schema.Request) trace.TraceID {
	t.Helper()
	ctx, sp := tr.Start(context.Background(), "agent.turn")
	defer sp.End()
	b, _ := json.Marshal(q)
	msg := nats.NewMsg(topo.Names().RequestsSubject(q.Session))
	msg.Data = b
	if !tracing.Inject(ctx, msg.Header) || msg.Header.Get("traceparent") == "" {
		t.Fatal("no traceparent on the request")
	}
	if _, err := topo.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(stream.RequestMsgIDOf(q))); err != nil {
		t.Fatal(err)
	}
	return sp.SpanContext().TraceID()
}

// TestTraceAcrossCrashReviewAndRetry: an agent's request (traceparent on
// the request message) reaches a tool worker whose body is running when
// the worker dies (its connection cut: nothing drained, the lease left to
// expire). The recovery worker takes the session over and fences it,
// assesses the call needs_review, judges a signed review, issues a plan
// on request, and another tool worker runs the retry. Every span shares
// the request's trace or links to the call's span in it.
func TestTraceAcrossCrashReviewAndRetry(t *testing.T) {
	exp, agent := traced(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	emb, nc, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	entered := make(chan struct{}, 1)
	var runs atomic.Int32
	var bodyTrace atomic.Value
	ledger := worker.Tool{
		Metadata: effect.Metadata{Name: "ledger.post"}.WithEffect(effect.NonIdempotent, "ledger-v1"),
		// The dead worker's goroutines end with its body: the in-process
		// stand-in for a killed process holds nothing after that.
		Timeout: 2 * time.Second,
		Body: func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			if runs.Add(1) == 1 {
				bodyTrace.Store(trace.SpanContextFromContext(ctx).TraceID())
				entered <- struct{}{}
				<-ctx.Done() // dies with its worker
				return nil, ctx.Err()
			}
			return json.RawMessage(`{"posted":true}`), nil
		},
	}
	reg, err := worker.NewRegistry(ledger)
	if err != nil {
		t.Fatal(err)
	}
	pl := newPlanner(t)
	reviewer, _ := nkeys.CreateUser()
	rpub, _ := reviewer.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(rpub)
	twCfg := func(owner string) toolworker.Config {
		return toolworker.Config{Topology: topo, Registry: reg, Owner: owner, IdleTimeout: time.Minute,
			PollInterval: 100 * time.Millisecond, PlanRetryDelay: 100 * time.Millisecond,
			Runtime: worker.Config{TrustedPlanners: pl.trusted},
			Logger:  zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	}
	rec, err := recoverer.New(recoverer.Config{Topology: topo, TrustedReviewers: trusted, PlannerKey: pl.kp})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRec := context.WithCancel(ctx)
	recDone := make(chan error, 1)
	go func() { recDone <- rec.Run(rctx) }()
	t.Cleanup(func() { stopRec(); <-recDone })

	defer func() {
		if t.Failed() {
			n := spanSet(exp.GetSpans()).names()
			t.Logf("%d spans, last: %v", len(n), n[max(0, len(n)-30):])
		}
	}()
	crash := crashable(t, emb, topo, twCfg("tw-a"))
	tid := agentRequest(t, agent, topo, schema.Request{V: 1, RequestID: "r-post", Session: "s-books", Task: "t-1", Tool: "ledger.post", Arguments: json.RawMessage(`{"amount":5}`)})
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the body never ran")
	}
	if got := bodyTrace.Load().(trace.TraceID); got != tid {
		t.Fatalf("the body's ctx is in trace %s, the request's is %s", got, tid)
	}
	crash()
	// Once the lease expired, the host's prepare has the recovery worker
	// take the session over and fence it: the call is needs_review.
	var callID string
	streamtest.Eventually(t, 30*time.Second, "the call assessed after the takeover", func() bool {
		for _, sp := range spanSet(exp.GetSpans()).named(tracing.SpanAssessment, tracing.AttrSession.String("s-books")) {
			callID = attrOf(sp, tracing.AttrCallID)
			return true
		}
		var p schema.Plan
		for _, sp := range spanSet(exp.GetSpans()).named(tracing.StartToolCallName("ledger.post")) {
			_ = apiCall(t, ctx, nc, topo, service.EndpointPrepare, service.Target{Session: "s-books", CallID: attrOf(sp, tracing.AttrCallID)}, &p)
		}
		time.Sleep(200 * time.Millisecond) // prepare is asked again, not waited on
		return false
	})
	runWorker(t, twCfg("tw-b"))
	sign := func(v schema.Verdict) schema.Review {
		r, err := recovery.SignReview(reviewer, schema.Review{V: 1, Session: "s-books", CallID: callID, Operator: "bob@finance", Evidence: "bank statement 7", Verdict: v})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	b, _ := json.Marshal(sign(schema.VerdictNotExecuted))
	if _, err := topo.JS.Publish(ctx, topo.Names().ReviewsSubject("s-books"), b); err != nil {
		t.Fatal(err)
	}
	var plan schema.Plan
	streamtest.Eventually(t, 20*time.Second, "a plan on the signed review", func() bool {
		return apiCall(t, ctx, nc, topo, service.EndpointPrepare, service.Target{Session: "s-books", CallID: callID}, &plan) == ""
	})
	streamtest.Eventually(t, 30*time.Second, "the retry ran", func() bool {
		return len(spanSet(exp.GetSpans()).named("jw.retry", tracing.AttrStatus.String("ok"))) > 0
	})

	s := spanSet(exp.GetSpans())
	call := tracing.AttrCallID.String(callID)
	// The request and the call's own spans: children in the agent's trace.
	req := s.one(t, "jw.request", tracing.AttrCallID.String(callID))
	startSpan := s.one(t, tracing.StartToolCallName("ledger.post"), call)
	runSpan := s.one(t, tracing.RunToolCallName("ledger.post"), call)
	for _, sp := range []tracetest.SpanStub{req, startSpan, runSpan} {
		if sp.SpanContext.TraceID() != tid {
			t.Errorf("%s in trace %s, want the request's %s", sp.Name, sp.SpanContext.TraceID(), tid)
		}
	}
	if startSpan.Parent.SpanID() != req.SpanContext.SpanID() || runSpan.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("StartToolCall and RunToolCall are not children of the request span")
	}
	// StartToolCall is the publish span of the call's start (messaging
	// attributes); RunToolCall is the publish span of the body's result,
	// its append a span event.
	if attrOf(startSpan, "messaging.system") != "nats" || attrOf(startSpan, "messaging.destination.name") != "events.s-books" {
		t.Errorf("StartToolCall has no messaging attributes: %v", startSpan.Attributes)
	}
	underRetry := false
	for _, sp := range s.named(tracing.RunToolCallName("ledger.post"), attribute.String("jingwei.event", "tool.result"), attribute.String("messaging.system", "nats"), tracing.AttrStatus.String("ok")) {
		for _, ev := range sp.Events {
			underRetry = underRetry || (ev.Name == "send events.s-books" && s.ancestorIn(sp, "jw.retry"))
		}
	}
	if !underRetry {
		t.Errorf("the retry's tool.result append is not a messaging span event of its RunToolCall under the retry")
	}
	// The takeover, the assessment, the review and the plan link back.
	fenced := false
	for _, to := range s.named(tracing.SpanTakeover, tracing.AttrSession.String("s-books")) {
		fenced = fenced || linksTo(to, tid, "fenced_call")
	}
	if !fenced {
		t.Errorf("no takeover span links to the fenced call")
	}
	as := s.one(t, tracing.SpanAssessment, call)
	if !linksTo(as, tid, "assessment_of") || attrOf(as, tracing.AttrDecision) != string(schema.DecisionNeedsReview) || attrOf(as, tracing.AttrOutcome) == "" || attrOf(as, tracing.AttrEvidence) == "" {
		t.Errorf("assessment span %+v / %+v", as.Attributes, as.Links)
	}
	rv := s.one(t, tracing.SpanReview, call)
	if !linksTo(rv, tid, "review_of") || attrOf(rv, tracing.AttrVerdict) != string(schema.VerdictNotExecuted) || attrOf(rv, tracing.AttrSigner) != rpub {
		t.Errorf("review span %+v / %+v", rv.Attributes, rv.Links)
	}
	pi := s.one(t, tracing.SpanPlanIssue, tracing.AttrPlanID.String(plan.PlanID))
	if !linksTo(pi, tid, "plan_for") || attrOf(pi, tracing.AttrVerdict) != string(schema.VerdictNotExecuted) {
		t.Errorf("plan issue span %+v / %+v", pi.Attributes, pi.Links)
	}
	// The retry continues the plan's trace and links to the call it retries.
	retry := s.one(t, "jw.retry", tracing.AttrSession.String("s-books"))
	if retry.SpanContext.TraceID() != pi.SpanContext.TraceID() || !s.ancestorIn(retry, tracing.SpanPlanIssue) {
		t.Errorf("the retry span is not under the plan's issue")
	}
	rstart := s.one(t, tracing.StartToolCallName("ledger.post"), tracing.AttrPlanID.String(plan.PlanID))
	if !linksTo(rstart, tid, "retry_of") || rstart.Parent.SpanID() != retry.SpanContext.SpanID() {
		t.Errorf("the retry's StartToolCall %+v / %+v", rstart.Attributes, rstart.Links)
	}
	// The trace context is in the stored message's headers only: the
	// event's bytes carry no trace id, and the plan's signature verifies.
	h, err := topo.Logs().Load(ctx, "s-books")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range h {
		if ev.Call == nil || ev.Call.CallID != callID {
			continue
		}
		m, ok, err := topo.Reader().LeaderGet(ctx, topo.Events.CachedInfo().Config.Name, ev.Seq, topo.Names().EventsSubject("s-books"))
		if err != nil || !ok {
			t.Fatalf("stored tool.call: %v", err)
		}
		if tracing.SpanContextOf(m.Header).TraceID() != tid {
			t.Errorf("stored tool.call headers %v carry no traceparent of the request", m.Header)
		}
		if strings.Contains(string(m.Data), tid.String()) || strings.Contains(string(m.Data), "traceparent") {
			t.Errorf("trace context inside the event's bytes: %s", m.Data)
		}
	}
	if err := recovery.VerifyPlan(plan, pl.trusted); err != nil {
		t.Errorf("plan signature: %v", err)
	}
	if take := s.one(t, tracing.SpanPlanTake, tracing.AttrPlanID.String(plan.PlanID)); !s.ancestorIn(take, "jw.retry") {
		t.Errorf("the plan's consumption is not under the retry")
	}
}

// attrOf returns sp's attribute k as a string ("" if absent).
func attrOf(sp tracetest.SpanStub, k attribute.Key) string {
	for _, a := range sp.Attributes {
		if a.Key == k {
			return a.Value.Emit()
		}
	}
	return ""
}

// apiCall calls a jw.api endpoint and returns the error code ("" on
// success, with the answer in out).
func apiCall(t *testing.T, ctx context.Context, nc *nats.Conn, topo *stream.Topology, endpoint string, body, out any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	m, err := nc.RequestWithContext(ctx, topo.Names().APISubject(endpoint), b)
	if errors.Is(err, nats.ErrNoResponders) {
		return "no_responders"
	}
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return code
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatalf("%s answer %s: %v", endpoint, m.Data, err)
	}
	return ""
}

// TestTraceAcrossApprovalAndRestart: a call waits for approval; its worker
// dies; the next worker takes the session over and, on a signed approval,
// runs the call. The approval's span carries the verdict, the approver and
// the signer's key and links to the call's span in the request's trace;
// the body runs under it.
func TestTraceAcrossApprovalAndRestart(t *testing.T) {
	exp, agent := traced(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	emb, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	approver, _ := nkeys.CreateUser()
	apub, _ := approver.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(apub)
	var runs atomic.Int32
	pay := worker.Tool{
		Metadata: effect.Metadata{Name: "pay"}.WithEffect(effect.NonIdempotent, "pay-v1"),
		Approval: &worker.ApprovalRule{Timeout: time.Minute},
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`{"charged":true}`), nil
		},
	}
	reg, err := worker.NewRegistry(pay)
	if err != nil {
		t.Fatal(err)
	}
	twCfg := func(owner string) toolworker.Config {
		return toolworker.Config{Topology: topo, Registry: reg, Owner: owner, IdleTimeout: 300 * time.Millisecond,
			PollInterval: 100 * time.Millisecond, DrainTimeout: 2 * time.Second,
			Runtime: worker.Config{TrustedApprovers: trusted},
			Logger:  zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	}
	defer func() {
		if t.Failed() {
			n := spanSet(exp.GetSpans()).names()
			t.Logf("%d spans, last: %v", len(n), n[max(0, len(n)-30):])
		}
	}()
	crash := crashable(t, emb, topo, twCfg("tw-a"))
	tid := agentRequest(t, agent, topo, schema.Request{V: 1, RequestID: "r-pay", Session: "s-pay", Task: "t-1", Tool: "pay", Arguments: json.RawMessage(`{"amount":5}`)})
	var callID string
	streamtest.Eventually(t, 20*time.Second, "the call waits for approval", func() bool {
		for _, sp := range spanSet(exp.GetSpans()).named("send events.s-pay", attribute.String("jingwei.event", string(schema.TypeApprovalRequested))) {
			callID = attrOf(sp, tracing.AttrCallID)
			return sp.SpanContext.TraceID() == tid
		}
		return false
	})
	crash()
	runWorker(t, twCfg("tw-b"))
	a, err := recovery.SignApproval(approver, schema.Approval{V: 1, Session: "s-pay", CallID: callID, Decision: schema.Approved, Approver: "alice@ops"})
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.PublishApproval(ctx, topo.JS, "", a); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 30*time.Second, "the approved call ran", func() bool {
		return len(spanSet(exp.GetSpans()).named(tracing.SpanApproval, tracing.AttrCallID.String(callID))) > 0
	})
	s := spanSet(exp.GetSpans())
	ap := s.one(t, tracing.SpanApproval, tracing.AttrCallID.String(callID))
	if !linksTo(ap, tid, "approval_of") {
		t.Errorf("the approval span does not link to the call's span: %+v", ap.Links)
	}
	if attrOf(ap, tracing.AttrVerdict) != string(schema.Approved) || attrOf(ap, tracing.AttrSigner) != apub || attrOf(ap, tracing.AttrApprover) != "alice@ops" {
		t.Errorf("approval span attributes %v", ap.Attributes)
	}
	run := s.one(t, tracing.RunToolCallName("pay"), tracing.AttrCallID.String(callID))
	if !s.ancestorIn(run, tracing.SpanApproval) || attrOf(run, tracing.AttrStatus) != "ok" {
		t.Errorf("the body's span is not under the approval, or not ok: %v", run.Attributes)
	}
	if runs.Load() != 1 {
		t.Fatalf("body ran %d times", runs.Load())
	}
}
