package recoverer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// The recovery worker's spans: the takeover and its fence, each
// assessment, each review it judges and each plan it issues. The call
// they are about ran in another process, often one that crashed: each
// span links to the call's original span, whose context the call's
// writer stored in the NATS headers of its tool.call message (never in
// the event). Every helper returns at once while tracing is off.

// callSpanContext returns the span context stored with the session-log
// message at seq (a tool.call); invalid when there is none.
func (b *base) callSpanContext(ctx context.Context, session string, seq uint64) trace.SpanContext {
	if seq == 0 {
		return trace.SpanContext{}
	}
	h, err := b.t.Logs().EventHeaders(ctx, session, seq)
	if err != nil {
		return trace.SpanContext{}
	}
	return tracing.SpanContextOf(h)
}

// callSeqIn returns the stream sequence of callID's tool.call in h (0
// when h holds none).
func callSeqIn(h []schema.Event, callID string) uint64 {
	for i := range h {
		if c := h[i].Call; c != nil && c.CallID == callID {
			return h[i].Seq
		}
	}
	return 0
}

// endWith ends sp, recording err.
func endWith(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// startTakeoverSpan starts the span of a takeover of session (the fence
// append is its child: the fence message carries its context).
func (r *takeovers) startTakeoverSpan(ctx context.Context, session string) (context.Context, func()) {
	if !tracing.Enabled() {
		return ctx, func() {}
	}
	ctx, sp := tracing.Start(ctx, tracing.SpanTakeover, trace.WithAttributes(tracing.AttrSession.String(session)))
	return ctx, func() { sp.End() }
}

// noteTakeover records the takeover's epoch and fence on its span and
// links the span to the original span of every call the fence closed.
func (r *takeovers) noteTakeover(ctx context.Context, session string, epoch, fenceSeq uint64, h []schema.Event) {
	if !tracing.Enabled() {
		return
	}
	sp := trace.SpanFromContext(ctx)
	sp.SetAttributes(tracing.AttrEpoch.Int64(int64(epoch)), tracing.AttrFenceSeq.Int64(int64(fenceSeq)))
	for _, id := range recovery.OpenIn(h, fenceSeq) {
		if sc := r.callSpanContext(ctx, session, callSeqIn(h, id)); sc.IsValid() {
			sp.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.AttrLinkKind.String("fenced_call"), tracing.AttrCallID.String(id)}})
		}
	}
}

// startAssessmentSpan starts the span of the assessment a of the call
// whose tool.call is at callSeq (0: unknown), linked to the call's span.
func (c *classifier) startAssessmentSpan(ctx context.Context, a *schema.Assessment, callSeq uint64) (context.Context, func(error)) {
	if !tracing.Enabled() {
		return ctx, func(error) {}
	}
	opts := append(tracing.LinkTo(c.callSpanContext(ctx, a.Session, callSeq), "assessment_of"), trace.WithAttributes(
		tracing.AttrSession.String(a.Session), tracing.AttrCallID.String(a.CallID),
		tracing.AttrTool.String(a.Tool), tracing.AttrTask.String(a.Task), tracing.AttrOpKey.String(a.Key),
		tracing.AttrOutcome.String(string(a.Outcome)), tracing.AttrEvidence.String(a.Evidence),
		tracing.AttrDecision.String(string(a.Decision))))
	ctx, sp := tracing.Start(ctx, tracing.SpanAssessment, opts...)
	return ctx, func(err error) { endWith(sp, err) }
}

// startReviewSpan starts the span of the judging of the review message m
// (a child of the trace context its headers carry, if any).
func (r *reviewChecker) startReviewSpan(ctx context.Context, m jetstream.Msg) (context.Context, func(context.Context, schema.Review, error)) {
	if !tracing.Enabled() {
		return ctx, func(context.Context, schema.Review, error) {}
	}
	ctx, sp := tracing.Consume(tracing.Extract(ctx, m.Headers()), tracing.SpanReview, m.Subject())
	return ctx, func(ctx context.Context, rv schema.Review, err error) {
		sp.SetAttributes(tracing.AttrSession.String(rv.Session), tracing.AttrCallID.String(rv.CallID),
			tracing.AttrVerdict.String(string(rv.Verdict)), tracing.AttrSigner.String(rv.Signer),
			tracing.AttrOperator.String(rv.Operator))
		if rv.Session != "" && rv.CallID != "" {
			if h, lerr := r.t.Logs().Load(ctx, rv.Session); lerr == nil {
				if sc := r.callSpanContext(ctx, rv.Session, callSeqIn(h, rv.CallID)); sc.IsValid() {
					sp.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.AttrLinkKind.String("review_of")}})
				}
			}
		}
		endWith(sp, err)
	}
}

// issueTraced is issue under the span of the plan's issue, linked to the
// original span of the call it retries (the tool.call at plan.PriorSeq);
// the plan message carries the span's context, so the retry that consumes
// it continues this trace.
func (r *issuer) issueTraced(ctx context.Context, plan schema.Plan) (schema.Plan, error) {
	if !tracing.Enabled() {
		return r.issue(ctx, plan)
	}
	opts := append(tracing.LinkTo(r.callSpanContext(ctx, plan.Session, plan.PriorSeq), "plan_for"), trace.WithAttributes(
		tracing.AttrSession.String(plan.Session), tracing.AttrPlanID.String(plan.PlanID),
		tracing.AttrPriorID.String(plan.PriorCallID), tracing.AttrOpKey.String(plan.Key),
		tracing.AttrBasis.String(string(plan.Basis)), tracing.AttrSigner.String(plan.Signer)))
	if rv := plan.Review; rv != nil {
		opts = append(opts, trace.WithAttributes(tracing.AttrVerdict.String(string(rv.Verdict)), tracing.AttrReviewSigner.String(rv.Signer)))
	}
	ctx, sp := tracing.Start(ctx, tracing.SpanPlanIssue, opts...)
	out, err := r.issue(ctx, plan)
	endWith(sp, err)
	return out, err
}
