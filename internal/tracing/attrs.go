package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// jingwei's own span attributes (no semantic convention covers them).
const (
	AttrSession  = attribute.Key("jingwei.session")
	AttrCallID   = attribute.Key("jingwei.call_id")
	AttrTool     = attribute.Key("jingwei.tool")
	AttrTask     = attribute.Key("jingwei.task")
	AttrOpKey    = attribute.Key("jingwei.op_key")
	AttrStatus   = attribute.Key("jingwei.status")
	AttrStage    = attribute.Key("jingwei.stage")
	AttrEpoch    = attribute.Key("jingwei.epoch")
	AttrOutcome  = attribute.Key("jingwei.outcome")
	AttrEvidence = attribute.Key("jingwei.evidence")
	AttrDecision = attribute.Key("jingwei.decision")
	AttrVerdict  = attribute.Key("jingwei.verdict")
	AttrSigner   = attribute.Key("jingwei.signer")
	AttrApprover = attribute.Key("jingwei.approver")
	AttrOperator = attribute.Key("jingwei.operator")
	AttrPlanID   = attribute.Key("jingwei.plan_id")
	AttrPriorID  = attribute.Key("jingwei.prior_call_id")
	AttrRetry    = attribute.Key("jingwei.retry")
	AttrEvent    = attribute.Key("jingwei.event")
	AttrLinkKind = attribute.Key("jingwei.link")
	AttrFenceSeq = attribute.Key("jingwei.fence_seq")
	AttrBasis    = attribute.Key("jingwei.basis")
	// AttrReviewSigner is the key that signed the review a plan rests on.
	AttrReviewSigner = attribute.Key("jingwei.review.signer")
)

// Span names jingwei uses besides the per-tool ones.
const (
	SpanRequest    = "jw.request"
	SpanTakeover   = "jw.takeover"
	SpanAssessment = "jw.assessment"
	SpanReview     = "jw.review"
	SpanApproval   = "jw.approval"
	SpanPlanIssue  = "jw.plan.issue"
	SpanPlanTake   = "jw.plan.consume"
)

// StartToolCallName and RunToolCallName name a call's admission-and-start
// span and its body's span, as Temporal names StartActivity/RunActivity.
func StartToolCallName(tool string) string { return "StartToolCall:" + tool }

// RunToolCallName names the span of a call's body.
func RunToolCallName(tool string) string { return "RunToolCall:" + tool }

func linkAttrs(kind string) []attribute.KeyValue {
	if kind == "" {
		return nil
	}
	return []attribute.KeyValue{AttrLinkKind.String(kind)}
}

// Messaging returns the messaging semantic-convention attributes of an
// operation ("publish", "process") on a NATS subject, with extra appended.
func Messaging(subject, operation string, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append(AppendMessaging(make([]attribute.KeyValue, 0, 4+len(extra)), subject, operation), extra...)
}

// AppendMessaging appends the messaging attributes of Messaging to dst
// (for a caller that has room for them).
func AppendMessaging(dst []attribute.KeyValue, subject, operation string) []attribute.KeyValue {
	op := semconv.MessagingOperationTypeSend
	if operation == "process" {
		op = semconv.MessagingOperationTypeProcess
	}
	return append(dst, natsSystem, op, semconv.MessagingOperationName(operation), semconv.MessagingDestinationName(subject))
}

var natsSystem = semconv.MessagingSystemKey.String("nats")

// Publish starts a producer span for a message jingwei publishes on
// subject (messaging semantic conventions: "send <destination>"), with
// the event type when it is a session-log event, and extra attributes.
// The span's context is what Inject then puts on the message.
func Publish(ctx context.Context, subject, event string, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	if event != "" {
		extra = append(extra, AttrEvent.String(event))
	}
	return Start(ctx, "send "+subject, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(Messaging(subject, "publish", extra...)...))
}

// Consume starts a consumer span ("process <destination>") for a message
// received on subject, as a child of the trace context its headers carry
// (extracted by the caller into ctx), with opts added.
func Consume(ctx context.Context, name, subject string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(Messaging(subject, "process")...))
	return Start(ctx, name, opts...)
}
