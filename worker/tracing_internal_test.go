package worker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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

// BenchmarkTracingExportPerCall is what the OTLP/HTTP exporter spends on
// one call's spans (its StartToolCall and RunToolCall, as the hooks make
// them): a batch of 256 calls' spans encoded to protobuf and posted to an
// endpoint in this process, per call.
func BenchmarkTracingExportPerCall(b *testing.B) {
	rec := tracetest.NewSpanRecorder()
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	r := &Runtime{cfg: Config{Session: "s-1"}}
	ctx := context.Background()
	const calls = 256
	for range calls {
		c, end := r.startCallSpan(ctx, noopTool, CallOptions{})
		call := schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-f5bd5efb8cd6b2d5a60e450dbc969bb3", Tool: "noop", Operation: &schema.Operation{Key: "op-a88564182bca5f2e6100f0eb3549b893"}}}
		_, _ = r.startAppendSpan(c, &call)
		c = started(c)
		c2, endRun := r.startRunSpan(c, noopTool, BodyRequest{Session: "s-1", CallID: "c-f5bd5efb8cd6b2d5a60e450dbc969bb3", Tool: "noop"})
		_, endSend := r.startAppendSpan(c2, &schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK}})
		endSend(2, nil)
		endRun(&Result{Status: schema.StatusOK})
		end()
	}
	tracing.Use(nil)
	spans := rec.Ended()
	if len(spans) != 2*calls {
		b.Fatalf("%d spans", len(spans))
	}
	var bytes int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		bytes = n
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = exp.Shutdown(ctx) }()
	b.ReportAllocs()
	for b.Loop() {
		if err := exp.ExportSpans(ctx, spans); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/calls, "ns/call")
	b.ReportMetric(float64(bytes)/calls, "B/call")
}
