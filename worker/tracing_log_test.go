package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/worker"
)

// TestCallLogCarriesTraceIDs: a call's log line (here its rejection at
// stage arguments) carries the trace_id and span_id of the call's span,
// in the trace of the caller's span.
func TestCallLogCarriesTraceIDs(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Use(tp)
	t.Cleanup(func() { tracing.Use(nil) })
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata:    effect.Metadata{Name: "greet"}.WithEffect(effect.ReadOnly, "greet-v1"),
		InputSchema: json.RawMessage(`{"type":"object","required":["name"]}`),
		Body:        func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rt, err := worker.New(worker.Config{Session: "s-1", Log: &nopLog{}, Registry: reg, Plans: stubPlans{}, Budget: nopCounter{},
		Logger: zerolog.New(&out)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, sp := tp.Tracer("agent").Start(context.Background(), "agent.turn")
	_, _ = rt.Call(ctx, "greet", json.RawMessage(`{}`))
	sp.End()
	tid := sp.SpanContext().TraceID().String()
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(l, "call rejected") {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line == nil {
		t.Fatalf("no rejection logged: %s", out.String())
	}
	if line["trace_id"] != tid || line["span_id"] == nil || line["span_id"] == "" {
		t.Fatalf("log line %v, want trace_id %s and a span_id", line, tid)
	}
}
