package mcpserver_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/worker/mcpserver"
)

// TestMetaTraceparentReachesTheCall: an MCP client's _meta traceparent is
// the trace of the whole call: the tools/call span, the jw.api.call
// request, the tool worker's request, StartToolCall and RunToolCall (the
// body's ctx) are all in it.
func TestMetaTraceparentReachesTheCall(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Use(tp)
	t.Cleanup(func() { tracing.Use(nil); _ = tp.Shutdown(context.Background()) })
	st := start(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	s := connect(t, st.url, &bearer{token: "tok-1", next: http.DefaultTransport})
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "ledger.noop", Arguments: map[string]any{},
		Meta: mcp.Meta{mcpserver.MetaSession: "agent-1-s", mcpserver.MetaTraceparent: "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %s", err, text(res))
	}
	want := map[string]bool{"tools/call ledger.noop": false, "process jw.api.call": false, "jw.request": false,
		tracing.StartToolCallName("ledger.noop"): false, tracing.RunToolCallName("ledger.noop"): false}
	for _, sp := range exp.GetSpans() {
		if _, ok := want[sp.Name]; ok && sp.SpanContext.TraceID().String() == traceID {
			want[sp.Name] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no span %s in the client's trace", name)
		}
	}
}
