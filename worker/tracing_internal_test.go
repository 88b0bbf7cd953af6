package worker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
)

// TestTracingOffCostsNoAllocation: with tracing off (no OTEL_*), every
// hook a call runs — its StartToolCall, its start, its body's span, an
// append's span, the log's header injection — allocates nothing and
// returns the context it was given.
func TestTracingOffCostsNoAllocation(t *testing.T) {
	tracing.Use(nil)
	r := &Runtime{cfg: Config{Session: "s-1"}}
	ctx := context.Background()
	ev := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK}}
	req := BodyRequest{Session: "s-1", CallID: "c-1", Tool: "noop", Arguments: json.RawMessage(`{}`)}
	res := &Result{Status: schema.StatusOK}
	h := nats.Header{}
	allocs := testing.AllocsPerRun(1000, func() {
		c, end := r.startCallSpan(ctx, noopTool, CallOptions{})
		c = started(c)
		c2, endRun := r.startRunSpan(c, noopTool, req)
		endRun(res)
		c3, endSend := r.startAppendSpan(c2, &ev)
		if endSend != nil || c3 != ctx {
			t.Fatal("a span with tracing off")
		}
		if tracing.Inject(c3, h) || len(h) != 0 {
			t.Fatal("headers with tracing off")
		}
		end()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call with tracing off, want 0", allocs)
	}
}

var noopTool = &registered{Tool: Tool{Metadata: effect.Metadata{Name: "noop"}}, startSpan: tracing.StartToolCallName("noop"), runSpan: tracing.RunToolCallName("noop")}

// BenchmarkTracingOffHooks is the cost of a call's hooks with tracing off.
func BenchmarkTracingOffHooks(b *testing.B) {
	tracing.Use(nil)
	r := &Runtime{cfg: Config{Session: "s-1"}}
	ctx := context.Background()
	ev := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK}}
	req := BodyRequest{Session: "s-1", CallID: "c-1", Tool: "noop"}
	res := &Result{}
	h := nats.Header{}
	b.ReportAllocs()
	for b.Loop() {
		c, end := r.startCallSpan(ctx, noopTool, CallOptions{})
		c = started(c)
		c2, endRun := r.startRunSpan(c, noopTool, req)
		endRun(res)
		_, _ = r.startAppendSpan(c2, &ev)
		_ = tracing.Inject(c2, h)
		end()
	}
}

// BenchmarkTracingOnHooks is the cost of a call's hooks with tracing on
// (no NATS): its two spans with their attributes, the span event of the
// result's publish and the trace context put on both appends' headers.
// sdk: a provider whose processor drops every ended span; otlp: the
// batch processor and the OTLP/HTTP exporter posting to an endpoint in
// this process.
func BenchmarkTracingOnHooks(b *testing.B) {
	for _, mode := range []string{"sdk", "otlp"} {
		b.Run(mode, func(b *testing.B) {
			tp := benchProvider(b, mode)
			tracing.Use(tp)
			defer tracing.Use(nil)
			r := &Runtime{cfg: Config{Session: "s-1"}}
			ctx := context.Background()
			call := schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "noop", Operation: &schema.Operation{Key: "op-1"}}}
			ev := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK}}
			req := BodyRequest{Session: "s-1", CallID: "c-1", Tool: "noop"}
			res := &Result{Status: schema.StatusOK}
			h := nats.Header{}
			b.ReportAllocs()
			for b.Loop() {
				c, end := r.startCallSpan(ctx, noopTool, CallOptions{})
				if _, endSend := r.startAppendSpan(c, &call); endSend != nil {
					b.Fatal("a span of its own for the tool.call")
				}
				_ = tracing.Inject(c, h)
				tracing.Clear(h)
				c = started(c)
				c2, endRun := r.startRunSpan(c, noopTool, req)
				_, endSend := r.startAppendSpan(c2, &ev)
				_ = tracing.Inject(c2, h)
				tracing.Clear(h)
				endSend(2, nil)
				endRun(res)
				end()
			}
		})
	}
}
