package worker

import (
	"context"

	"github.com/nats-io/nats.go"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
)

// A call's spans: StartToolCall:<tool> covers admission and the start
// append and ends once the body may run; RunToolCall:<tool> covers the
// body and the append of its tool.result (its ctx is the tool's, so the
// body's own spans join the trace). Both are the producer spans of the
// appends they cover: they carry the messaging attributes, and the trace
// context stored with the tool.call and the tool.result names them. The
// tool.result's publish is a span event of RunToolCall (the body has
// returned; the span ends at the append's acknowledgement), not a span of
// its own: a span costs the exporting process several microseconds, a
// call's two spans already say everything the third did. Every other
// append (approval.requested, a refused call's tool.result, …) is a
// messaging "send" span. Both are children of the caller's span (the
// request's). Everything here returns at once while tracing is off.

// callTraceKey holds a call's callTrace.
type callTraceKey struct{}

// callTrace is what a call's hooks share, made in one allocation: the
// span StartToolCall was started under (so the body's span is its
// sibling, not its child), the call's two spans, and room for the
// attributes they start with (the SDK copies them when a span starts).
type callTrace struct {
	parent, start, run trace.Span
	subject            string // events.<session>
	attrs              [8]attribute.KeyValue
}

// producer is the span kind of a span that publishes messages.
var producer = trace.WithSpanKind(trace.SpanKindProducer)

// The runtime calls each hook only while tracing is on (tracing.Enabled,
// one atomic load, inlined at the call site): with tracing off a call
// makes no hook call, and in a build with -tags jw_notracing the check is
// the constant false and the hooks are gone. Each hook checks again, for
// other callers.

// nop is the end of a span not made.
func nop() {}

// nopResult is the end of a RunToolCall span not made.
func nopResult(*Result) {}

// startCallSpan starts StartToolCall:<tool>; a retry's span carries the
// plan and links to the original call's span (the trace context stored
// with the prior tool.call message). The returned func ends the span if
// the body never ran.
func (r *Runtime) startCallSpan(ctx context.Context, t *registered, opts CallOptions) (context.Context, func()) {
	if !tracing.Enabled() {
		return ctx, nop
	}
	ct := &callTrace{parent: trace.SpanFromContext(ctx), subject: "events." + r.cfg.Session}
	// The span publishes the call's start appends: messaging attributes.
	attrs := append(tracing.AppendMessaging(ct.attrs[:0], ct.subject, "publish"), tracing.AttrTool.String(t.Metadata.Name))
	sopts := []trace.SpanStartOption{producer, trace.WithAttributes(attrs...)}
	if p := opts.Retry; p != nil {
		sopts = append(sopts, trace.WithAttributes(tracing.AttrRetry.Bool(true), tracing.AttrPlanID.String(p.PlanID), tracing.AttrPriorID.String(p.PriorCallID)))
		sopts = append(sopts, tracing.LinkTo(r.callSpanContext(ctx, p.PriorSeq), "retry_of")...)
	}
	ctx, ct.start = tracing.Start(ctx, t.startSpan, sopts...)
	return context.WithValue(ctx, callTraceKey{}, ct), func() { ct.start.End() }
}

// callSpanContext returns the span context stored in the headers of the
// session-log message at seq (a call's tool.call): invalid when there is
// none or the log cannot say.
func (r *Runtime) callSpanContext(ctx context.Context, seq uint64) trace.SpanContext {
	l, ok := r.cfg.Log.(interface {
		HeadersAt(context.Context, uint64) (nats.Header, error)
	})
	if !ok || seq == 0 {
		return trace.SpanContext{}
	}
	h, err := l.HeadersAt(ctx, seq)
	if err != nil {
		return trace.SpanContext{}
	}
	return tracing.SpanContextOf(h)
}

// started ends the call's StartToolCall span (its start is on the log)
// and returns ctx under the span it was started in.
func started(ctx context.Context) context.Context {
	if !tracing.Enabled() {
		return ctx
	}
	ct, ok := ctx.Value(callTraceKey{}).(*callTrace)
	if !ok {
		return ctx
	}
	ct.start.End()
	return trace.ContextWithSpan(ctx, ct.parent)
}

// startRunSpan starts RunToolCall:<tool> for the body of req and the
// append of its tool.result; end records what became of the call (the
// result as recorded) and ends the span.
func (r *Runtime) startRunSpan(ctx context.Context, t *registered, req BodyRequest) (context.Context, func(*Result)) {
	if !tracing.Enabled() {
		return ctx, nopResult
	}
	ct, ok := ctx.Value(callTraceKey{}).(*callTrace)
	if !ok || ct.run != nil {
		// A call resumed outside CallWithOptions (an approval's).
		ct = &callTrace{subject: "events." + r.cfg.Session}
		ctx = context.WithValue(ctx, callTraceKey{}, ct)
	}
	attrs := append(tracing.AppendMessaging(ct.attrs[:0], ct.subject, "publish"), tracing.AttrCallID.String(req.CallID),
		tracing.AttrEpoch.Int64(int64(req.Fence.Epoch)), tracing.AttrEvent.String(schema.TypeResult))
	ctx, ct.run = tracing.Start(ctx, t.runSpan, producer, trace.WithAttributes(attrs...))
	sp := ct.run
	return ctx, func(res *Result) {
		if res.Stage != "" {
			sp.SetAttributes(tracing.AttrStatus.String(string(res.Status)), tracing.AttrStage.String(string(res.Stage)))
		} else {
			sp.SetAttributes(tracing.AttrStatus.String(string(res.Status)))
		}
		if res.Status != schema.StatusOK {
			sp.SetStatus(codes.Error, res.Error)
		}
		sp.End()
	}
}

// resultOfRun reports whether ev is the tool.result published by ctx's
// span, a RunToolCall: the append is recorded on that span as an event
// (and its failure as the span's error).
func (r *Runtime) resultOfRun(ctx context.Context, ev *schema.Event) (func(seq uint64, err error), bool) {
	if ev.Type != schema.TypeResult {
		return nil, false
	}
	ct, ok := ctx.Value(callTraceKey{}).(*callTrace)
	if !ok || ct.run == nil || trace.SpanFromContext(ctx) != ct.run {
		return nil, false
	}
	sp := ct.run
	sp.AddEvent("send "+ct.subject, resultEvent)
	return func(_ uint64, err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
	}, true
}

// resultEvent is the attribute of a RunToolCall's span event for the
// publish of its tool.result.
var resultEvent = trace.WithAttributes(tracing.AttrEvent.String(schema.TypeResult))

// startAppendSpan starts the "send" span of one append of ev to the
// session log; the span's context is what the log puts in the message's
// headers. The start appends of a call (its tool.call, and tool.started)
// are published in its StartToolCall span itself, which takes the
// messaging attributes, and its body's tool.result in its RunToolCall
// span: no span of their own. nil end: no span.
func (r *Runtime) startAppendSpan(ctx context.Context, ev *schema.Event) (context.Context, func(seq uint64, err error)) {
	if !tracing.Enabled() {
		return ctx, nil
	}
	if ev.Type == schema.TypeCall || ev.Type == schema.TypeStarted {
		if ct, ok := ctx.Value(callTraceKey{}).(*callTrace); ok && trace.SpanFromContext(ctx) == ct.start {
			if c := ev.Call; c != nil && c.Operation != nil {
				ct.start.SetAttributes(tracing.AttrCallID.String(c.CallID), tracing.AttrOpKey.String(c.Operation.Key))
			}
			return ctx, nil
		}
	}
	if end, ok := r.resultOfRun(ctx, ev); ok {
		return ctx, end
	}
	attrs := []attribute.KeyValue{tracing.AttrCallID.String(ev.CallID())}
	if res := ev.Result; res != nil {
		attrs = append(attrs, tracing.AttrStatus.String(string(res.Status)))
		if res.Stage != "" {
			attrs = append(attrs, tracing.AttrStage.String(string(res.Stage)))
		}
	}
	ctx, sp := tracing.Publish(ctx, "events."+r.cfg.Session, ev.Type, attrs...)
	return ctx, func(seq uint64, err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}

// startApprovalSpan starts the span of an approval's answer to a waiting
// call (verdict, approver, signer key), linked to the call's original
// span: the worker that parked the call may be gone.
func (r *Runtime) startApprovalSpan(ctx context.Context, a schema.Approval, callSeq uint64) (context.Context, func()) {
	if !tracing.Enabled() {
		return ctx, func() {}
	}
	opts := append(tracing.LinkTo(r.callSpanContext(ctx, callSeq), "approval_of"), trace.WithAttributes(
		tracing.AttrSession.String(r.cfg.Session), tracing.AttrCallID.String(a.CallID),
		tracing.AttrVerdict.String(string(a.Decision)), tracing.AttrSigner.String(a.Signer),
		tracing.AttrApprover.String(a.Approver)))
	ctx, sp := tracing.Start(ctx, tracing.SpanApproval, opts...)
	return ctx, func() { sp.End() }
}

// startPlanTakeSpan starts the span of a plan's consumption by a retry.
func startPlanTakeSpan(ctx context.Context, p schema.Plan) (context.Context, func(Taken, error)) {
	if !tracing.Enabled() {
		return ctx, func(Taken, error) {}
	}
	ctx, sp := tracing.Start(ctx, tracing.SpanPlanTake, trace.WithAttributes(
		tracing.AttrSession.String(p.Session), tracing.AttrPlanID.String(p.PlanID),
		tracing.AttrPriorID.String(p.PriorCallID), tracing.AttrOpKey.String(p.Key),
		tracing.AttrSigner.String(p.Signer)))
	return ctx, func(t Taken, err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		} else {
			sp.SetAttributes(tracing.AttrCallID.String(t.CallID))
		}
		sp.End()
	}
}
