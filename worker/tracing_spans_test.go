package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// TestCallSpansAndTheirMessages: a call under an agent's span makes two
// spans in the agent's trace, both its children. StartToolCall publishes
// the tool.call (its messaging attributes, and the trace context stored
// with the tool.call names it); RunToolCall runs the body and publishes
// the tool.result: the result append is RunToolCall's messaging
// attributes, jingwei.event tool.result, a span event at the publish
// after the body returned, and the trace context stored with the
// tool.result names RunToolCall — not a span of its own.
func TestCallSpansAndTheirMessages(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Use(tp)
	t.Cleanup(func() { tracing.Use(nil) })
	_, _, topo := streamtest.StartWith(t, streamtest.Config{})
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return json.RawMessage(`{"ok":true}`), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lg, err := topo.Logs().OpenLog(ctx, "s-1", "w-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: "s-1", Log: lg, Registry: reg, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
	if err != nil {
		t.Fatal(err)
	}
	actx, agent := tp.Tracer("agent").Start(ctx, "agent.turn")
	res, err := rt.Call(actx, "noop", json.RawMessage(`{}`))
	agent.End()
	if err != nil {
		t.Fatal(err)
	}

	spans := map[string]tracetest.SpanStub{}
	for _, sp := range exp.GetSpans() {
		if _, dup := spans[sp.Name]; dup {
			t.Fatalf("two spans named %s", sp.Name)
		}
		spans[sp.Name] = sp
		if strings.HasPrefix(sp.Name, "send ") {
			t.Errorf("the call made a span of its own for an append: %s %v", sp.Name, sp.Attributes)
		}
	}
	start, run := spans[tracing.StartToolCallName("noop")], spans[tracing.RunToolCallName("noop")]
	if len(spans) != 3 || start.Name == "" || run.Name == "" {
		t.Fatalf("spans %v, want agent.turn, StartToolCall:noop and RunToolCall:noop", exp.GetSpans())
	}
	for _, sp := range []tracetest.SpanStub{start, run} {
		if sp.Parent.SpanID() != agent.SpanContext().SpanID() || sp.SpanContext.TraceID() != agent.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the agent's span", sp.Name)
		}
		if sp.SpanKind != trace.SpanKindProducer || !has(sp.Attributes, attribute.String("messaging.system", "nats")) ||
			!has(sp.Attributes, attribute.String("messaging.destination.name", "events.s-1")) || !has(sp.Attributes, tracing.AttrCallID.String(res.CallID)) {
			t.Errorf("%s is not the producer span of its appends: %v %v", sp.Name, sp.SpanKind, sp.Attributes)
		}
	}
	if !has(run.Attributes, tracing.AttrEvent.String(string(schema.TypeResult))) || !has(run.Attributes, tracing.AttrStatus.String("ok")) {
		t.Errorf("RunToolCall does not say it published an ok tool.result: %v", run.Attributes)
	}
	var sent bool
	for _, ev := range run.Events {
		sent = sent || (ev.Name == "send events.s-1" && has(ev.Attributes, tracing.AttrEvent.String(string(schema.TypeResult))))
	}
	if !sent {
		t.Errorf("RunToolCall has no span event for the tool.result's publish: %v", run.Events)
	}

	// What is stored: each message's trace context names its publisher.
	want := map[string]trace.SpanID{string(schema.TypeCall): start.SpanContext.SpanID(), string(schema.TypeResult): run.SpanContext.SpanID()}
	name := topo.Events.CachedInfo().Config.Name
	for seq := uint64(1); seq <= 10 && len(want) > 0; seq++ {
		m, ok, err := topo.Reader().LeaderGet(ctx, name, seq, topo.Names().EventsSubject("s-1"))
		if err != nil || !ok {
			break
		}
		var ev struct{ Type string }
		_ = json.Unmarshal(m.Data, &ev)
		id, ok := want[ev.Type]
		if !ok {
			continue
		}
		delete(want, ev.Type)
		if got := tracing.SpanContextOf(m.Header); got.SpanID() != id || got.TraceID() != agent.SpanContext().TraceID() {
			t.Errorf("the stored %s carries span %s of trace %s, want %s", ev.Type, got.SpanID(), got.TraceID(), id)
		}
	}
	if len(want) > 0 {
		t.Errorf("not found in the log: %v", want)
	}
}

func has(attrs []attribute.KeyValue, kv attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == kv {
			return true
		}
	}
	return false
}
