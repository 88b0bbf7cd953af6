package service

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"

	"github.com/jingwei/jingwei/internal/tracing"
)

// requestSpan starts the consumer span of one service request on subject,
// a child of the trace context its headers carry (an agent's traceparent
// on jw.api.call); end records the handler's error. A no-op while tracing
// is off.
func requestSpan(ctx context.Context, subject string, h nats.Header) (context.Context, func(error)) {
	if !tracing.Enabled() {
		return ctx, func(error) {}
	}
	ctx, sp := tracing.Consume(tracing.Extract(ctx, h), "process "+subject, subject)
	return ctx, func(err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}

// request sends a service request on subj; with tracing on, the caller's
// trace context goes in its headers (traceparent, tracestate).
func request(ctx context.Context, nc *nats.Conn, subj string, body []byte) (*nats.Msg, error) {
	if tracing.Enabled() {
		m := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
		if tracing.Inject(ctx, m.Header) {
			return nc.RequestMsgWithContext(ctx, m)
		}
	}
	return nc.RequestWithContext(ctx, subj, body)
}
