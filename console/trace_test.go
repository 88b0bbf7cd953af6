package console

import (
	"context"
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestCallLinksToItsTrace: with a trace UI address configured, a call's
// view links to the trace its tool.call message carries; without one, or
// for a call recorded without trace context, there is no link.
func TestCallLinksToItsTrace(t *testing.T) {
	_, nc, topo := streamtest.Start(t)
	ctx := context.Background()
	op := &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "r-1"}}
	appendCall := func(ctx context.Context, session string) {
		t.Helper()
		lg, err := topo.Logs().OpenLog(ctx, session, "w-1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "noop", Arguments: json.RawMessage(`{}`), StartMarker: true, Operation: op}}); err != nil {
			t.Fatal(err)
		}
	}
	appendCall(ctx, "s-untraced")
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	tracing.Use(tp)
	sctx, sp := tp.Tracer("agent").Start(ctx, "agent.turn")
	appendCall(sctx, "s-traced")
	sp.End()
	tracing.Use(nil) // the console itself does not trace
	want := "http://jaeger:16686/trace/" + sp.SpanContext().TraceID().String()

	c, err := New(Config{Reviewer: nc, Host: nc, Token: "a-test-token-of-some-length", TraceURL: "http://jaeger:16686/trace/{trace_id}"})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.loadCall(ctx, "s-traced", "c-1", nil); v.TraceURL != want {
		t.Errorf("traced call links to %q, want %q", v.TraceURL, want)
	}
	if v := c.loadCall(ctx, "s-untraced", "c-1", nil); v.TraceURL != "" {
		t.Errorf("untraced call links to %q", v.TraceURL)
	}
	plain, err := New(Config{Reviewer: nc, Host: nc, Token: "a-test-token-of-some-length"})
	if err != nil {
		t.Fatal(err)
	}
	if v := plain.loadCall(ctx, "s-traced", "c-1", nil); v.TraceURL != "" {
		t.Errorf("no trace UI configured, yet a link %q", v.TraceURL)
	}
}
