package tracing

import (
	"context"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// LogHook is a zerolog hook that adds trace_id and span_id to a line
// logged with the context of a recording span (Event.Ctx).
var LogHook zerolog.Hook = zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
	if !Enabled() {
		return
	}
	addIDs(e, trace.SpanContextFromContext(e.GetCtx()))
})

func addIDs(e *zerolog.Event, sc trace.SpanContext) {
	if sc.IsValid() {
		e.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
	}
}

// LogContext adds ctx's trace_id and span_id to a logger being built
// (unchanged when tracing is off or ctx holds no span).
func LogContext(ctx context.Context, lc zerolog.Context) zerolog.Context {
	if !Enabled() {
		return lc
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		lc = lc.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
	}
	return lc
}
