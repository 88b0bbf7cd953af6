package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
)

// Issue 28's target for tracing: runtime calls with every span exported
// over OTLP at least 0.9 of the same calls with tracing off, in the same
// run.
var tracingTarget = Target{Check: RatioAtLeast, Limit: 0.9}

func tracingStep(cfg Config) step {
	calls := cfg.n(6000, 1500, 20)
	name := "runtime call, no-op tool, tracing exported over OTLP vs tracing off (sync=interval)"
	return ratioStep("tracing", name, natsnode.SyncInterval, "calls/s", tracingTarget,
		func(ctx context.Context, e *env) (jw, raw []float64, err error) { return e.tracing(ctx, calls) })
}

// tracing measures, per round, calls/s of worker.Runtime.Call with a
// no-op tool with tracing on (an SDK provider batching every span — full
// sampling — to the OTLP/HTTP exporter, sending to an endpoint in this
// process that reads and drops what it gets) against the same calls with
// tracing off, alternating which side runs first. No OTEL_* variable is
// read: the batch processor has the SDK's defaults (OTEL_BSP_* unset:
// batches of 512 spans, a queue of 2,048, every 5 s), the exporter its own
// (no compression). A traced call is two spans (StartToolCall,
// RunToolCall), the trace context on its two appends, and their share of
// the exporter's batches. Tracing is jingwei's process-wide switch: it is
// turned on for the traced rounds only and off at the end.
func (e *env) tracing(ctx context.Context, calls int) (on, off []float64, err error) {
	topo, err := e.topology(ctx, e.prefix("tr"))
	if err != nil {
		return nil, nil, err
	}
	defer e.drop(topo)
	var received atomic.Int64 // bytes of OTLP export requests
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		received.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer func() {
		tracing.Use(nil)
		_ = tp.Shutdown(context.WithoutCancel(ctx))
	}()
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		return nil, nil, err
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	side := func(traced bool) func(ctx context.Context, round int) (float64, error) {
		return func(ctx context.Context, round int) (float64, error) {
			if traced {
				tracing.Use(tp)
				defer tracing.Use(nil)
			}
			return runtimeRound(topo, reg, plans, budget, args, calls, fmt.Sprintf("tr-%t", traced))(ctx, round)
		}
	}
	on, off, err = alternate(ctx, e.cfg.Rounds, side(true), side(false))
	if err != nil {
		return nil, nil, err
	}
	// The traced side is only honest if its spans were exported: a call's
	// two spans are about 780 bytes of protobuf; less than 400 a call
	// means the exporter dropped or failed to send some.
	if err := tp.ForceFlush(ctx); err != nil {
		return nil, nil, fmt.Errorf("bench: flushing the traced rounds' spans: %w", err)
	}
	if got, want := received.Load(), int64(400*calls*e.cfg.Rounds); got < want {
		return nil, nil, fmt.Errorf("bench: the OTLP endpoint received %d bytes for %d traced calls, want at least %d", got, calls*e.cfg.Rounds, want)
	}
	return on, off, nil
}
