package toolworker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
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

// startConfirmSpan starts the span of a session's takeover by this worker
// (its fence and the load of its history); end records the epoch and
// links the span to the original span of every call the fence closed.
func startConfirmSpan(ctx context.Context, session string) (context.Context, func(context.Context, *stream.Takeover, error)) {
	if !tracing.Enabled() {
		return ctx, func(context.Context, *stream.Takeover, error) {}
	}
	ctx, sp := tracing.Start(ctx, tracing.SpanTakeover, trace.WithAttributes(tracing.AttrSession.String(session)))
	return ctx, func(ctx context.Context, tk *stream.Takeover, err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		if tk != nil {
			sp.SetAttributes(tracing.AttrEpoch.Int64(int64(tk.Hold.Epoch())), tracing.AttrFenceSeq.Int64(int64(tk.FenceSeq)), attribute.Bool("jingwei.resumed", tk.Resumed))
			for _, id := range recovery.OpenIn(tk.History, tk.FenceSeq) {
				for i := range tk.History {
					if c := tk.History[i].Call; c != nil && c.CallID == id {
						if h, herr := tk.Log.HeadersAt(ctx, tk.History[i].Seq); herr == nil {
							if sc := tracing.SpanContextOf(h); sc.IsValid() {
								sp.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.AttrLinkKind.String("fenced_call"), tracing.AttrCallID.String(id)}})
							}
						}
					}
				}
			}
		}
		sp.End()
	}
}

// traceLog returns lg with ctx's trace_id and span_id (lg itself while
// tracing is off: no copy).
func traceLog(ctx context.Context, lg zerolog.Logger) zerolog.Logger {
	if !tracing.Enabled() {
		return lg
	}
	return tracing.LogContext(ctx, lg.With()).Logger()
}
