package toolworker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/worker"
)

// Span names of the messages a tool worker consumes.
const (
	spanRequest = "jw.request"
	spanRetry   = "jw.retry"
)

// consumeSpan starts the consumer span of a request or plan message m of
// session, as a child of the trace context the message's headers carry
// (the agent's, the gateway's or the plan issuer's); end records what
// became of the call. While tracing is off it returns ctx and a no-op.
func consumeSpan(ctx context.Context, m jetstream.Msg, name, session string) (context.Context, func(worker.Result, error)) {
	if !tracing.Enabled() {
		return ctx, func(worker.Result, error) {}
	}
	ctx = tracing.Extract(ctx, m.Headers())
	ctx, sp := tracing.Consume(ctx, name, m.Subject(), trace.WithAttributes(tracing.AttrSession.String(session)))
	return ctx, func(res worker.Result, err error) {
		sp.SetAttributes(tracing.AttrCallID.String(res.CallID), tracing.AttrOpKey.String(res.Operation.Key),
			tracing.AttrStatus.String(string(res.Status)))
		if err != nil {
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}
