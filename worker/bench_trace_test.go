package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// dropProcessor is a span processor that keeps nothing: spans are made
// and recorded in full, then dropped (the SDK's cost without an export).
type dropProcessor struct{}

func (dropProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropProcessor) Shutdown(context.Context) error                  { return nil }
func (dropProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkRuntimeCallTraced is runtime calls with a no-op tool on an
// embedded server (sync=interval) in alternating batches of 200: tracing
// off, every span made and dropped (sdk: the SDK's cost without an
// export), and every span batched to the OTLP/HTTP exporter posting to an
// endpoint in this process (otlp). It reports µs per call of each, and
// the ratios of calls/s to tracing off. For a profile of the traced side
// alone: -bench RuntimeCallTraced -cpuprofile cpu.out with JW_BENCH_TRACE=otlp.
func BenchmarkRuntimeCallTraced(b *testing.B) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: natsnode.SyncInterval})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	otlp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer func() { tracing.Use(nil); _ = otlp.Shutdown(ctx) }()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropProcessor{}))
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	modes := []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{{"off", nil}, {"sdk", sdk}, {"otlp", otlp}}
	if only := os.Getenv("JW_BENCH_TRACE"); only != "" {
		for _, m := range modes {
			if m.name == only {
				modes = append(modes[:0], m)
				break
			}
		}
	}
	rts := make([]*worker.Runtime, len(modes))
	calls := make([]int, len(modes))
	durs := make([]time.Duration, len(modes))
	const batch = 200
	for i := 0; b.Loop(); i++ {
		m := i / batch % len(modes)
		if calls[m]%20_000 == 0 {
			b.StopTimer()
			lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("bench-%s-%d", modes[m].name, calls[m]), "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			if rts[m], err = worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: reg, Plans: plans, Budget: budget}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if i%batch == 0 {
			if modes[m].tp == nil {
				tracing.Use(nil)
			} else {
				tracing.Use(modes[m].tp)
			}
		}
		t0 := time.Now()
		if res, err := rts[m].Call(ctx, "noop", args); err != nil || res.Status != schema.StatusOK {
			b.Fatal(res.Status, err)
		}
		durs[m] += time.Since(t0)
		calls[m]++
	}
	for m, mode := range modes {
		if calls[m] > 0 {
			b.ReportMetric(float64(durs[m].Microseconds())/float64(calls[m]), "µs/"+mode.name)
		}
	}
	if len(modes) == 3 && calls[1] > 0 && calls[2] > 0 {
		off := float64(durs[0]) / float64(calls[0])
		b.ReportMetric(off/(float64(durs[1])/float64(calls[1])), "ratio_sdk")
		b.ReportMetric(off/(float64(durs[2])/float64(calls[2])), "ratio_otlp")
	}
}

// BenchmarkAppendTraceContext is one fenced append (a tool.result) on an
// embedded server with the W3C trace context of a sampled span in its
// headers (traced) and without (plain), in alternating batches of 200:
// what carrying the trace context costs an append — the header made and
// sent, and the server reading it — without any span being made.
func BenchmarkAppendTraceContext(b *testing.B) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: natsnode.SyncInterval})
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropProcessor{})))
	defer tracing.Use(nil)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	traced := trace.ContextWithSpanContext(ctx, sc)
	var logs [2]*stream.Log
	var durs [2]time.Duration
	var n [2]int
	ev := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-00000000000000000000000000000000", Status: schema.StatusOK}}
	const batch = 200
	for i := 0; b.Loop(); i++ {
		side := i / batch % 2
		if n[side]%50_000 == 0 {
			b.StopTimer()
			lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("tc-%d-%d", side, n[side]), "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			logs[side] = lg
			b.StartTimer()
		}
		c := ctx
		if side == 1 {
			c = traced
		}
		t0 := time.Now()
		if _, err := logs[side].Append(c, ev); err != nil {
			b.Fatal(err)
		}
		durs[side] += time.Since(t0)
		n[side]++
	}
	if n[0] > 0 && n[1] > 0 {
		b.ReportMetric(float64(durs[0].Nanoseconds())/float64(n[0])/1000, "µs/plain")
		b.ReportMetric(float64(durs[1].Nanoseconds())/float64(n[1])/1000, "µs/traced")
	}
}
