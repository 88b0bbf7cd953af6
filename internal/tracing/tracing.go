// Package tracing is jingwei's OpenTelemetry plumbing: the tracer
// provider (off unless the standard OTEL_* environment asks for an
// exporter), W3C trace context carried in NATS message headers, span
// links to a call's original span, and trace ids on zerolog lines.
//
// Tracing is off by default. While it is off every helper here returns
// at once after one atomic load: no span, no header, no allocation. Trace
// context only ever travels in NATS headers (traceparent, tracestate);
// it is never part of the canonical, signed bytes of an event, review,
// approval or plan.
package tracing

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation is the instrumentation scope of jingwei's spans.
const Instrumentation = "github.com/jingwei/jingwei"

// state is the tracer in use; nil while tracing is off.
type state struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var current atomic.Pointer[state]

// Use makes jingwei trace with tp (and sets it, with the W3C trace-context
// and baggage propagators, as the OpenTelemetry globals, so a tool body's
// own spans join the call's trace). A nil tp turns tracing off. Safe for
// concurrent use; tests call it with an SDK provider over an in-memory
// exporter.
func Use(tp trace.TracerProvider) {
	if tp == nil {
		current.Store(nil)
		return
	}
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	current.Store(&state{tracer: tp.Tracer(Instrumentation), prop: prop})
}

// Enabled reports whether jingwei traces.
func Enabled() bool { return load() != nil }

// Start starts a span named name as a child of ctx's span. With tracing
// off it returns ctx and the (non-recording) span ctx already holds.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := load()
	if s == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return s.tracer.Start(ctx, name, opts...)
}

// Header is a nats.Header as an OpenTelemetry TextMapCarrier. NATS header
// names are case-sensitive: keys are set as the propagator names them
// (traceparent, tracestate, baggage) and read in that form or in the
// canonical MIME form another client may have used.
type Header nats.Header

// Get returns the first value of key.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(h).Get(key)
}

// Set sets key to value.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header's keys.
func (h Header) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Trace-context header names (W3C Trace Context).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Inject puts ctx's trace context on h (traceparent, tracestate) and
// reports whether it did: nothing while tracing is off or when ctx holds
// no valid span context. h must not be nil.
func Inject(ctx context.Context, h nats.Header) bool {
	s := load()
	if s == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return false
	}
	s.prop.Inject(ctx, Header(h))
	return true
}

// Clear removes what Inject put on h (for a pooled message).
func Clear(h nats.Header) {
	delete(h, HeaderTraceparent)
	delete(h, HeaderTracestate)
	delete(h, "baggage")
}

// Extract returns ctx with the remote span context carried by h as its
// parent; ctx unchanged while tracing is off or when h carries none.
func Extract(ctx context.Context, h nats.Header) context.Context {
	s := load()
	if s == nil || len(h) == 0 {
		return ctx
	}
	return s.prop.Extract(ctx, Header(h))
}

// SpanContextOf returns the span context carried by h (invalid when none,
// or while tracing is off).
func SpanContextOf(h nats.Header) trace.SpanContext {
	s := load()
	if s == nil || len(h) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(s.prop.Extract(context.Background(), Header(h)))
}

// LinkTo returns the span-start option linking a span to sc, with attrs
// on the link; no option (nil) when sc is not valid.
func LinkTo(sc trace.SpanContext, kind string) []trace.SpanStartOption {
	if !sc.IsValid() {
		return nil
	}
	return []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc, Attributes: linkAttrs(kind)})}
}

// TraceIDOf returns the W3C trace id a message's traceparent header
// carries ("" when it has none, or an invalid one), whether or not this
// process traces: for display (a link to a trace UI).
func TraceIDOf(h nats.Header) string {
	if len(h) == 0 {
		return ""
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), Header(h))
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
