package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jingwei/jingwei/internal/tracing"
)

// Trace context an MCP client may put in a tools/call request's _meta
// (W3C Trace Context names, as in an HTTP header): the call joins that
// trace, and jw.api.call carries it on.
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
)

// callSpan starts the span of one tools/call of tool, a child of the trace
// context in the request's _meta when it has one. A no-op while tracing
// is off.
func callSpan(ctx context.Context, meta mcp.Meta, tool string) (context.Context, func()) {
	if !tracing.Enabled() {
		return ctx, func() {}
	}
	h := nats.Header{}
	for _, k := range []string{MetaTraceparent, MetaTracestate} {
		if v, ok := meta[k].(string); ok && v != "" {
			h.Set(k, v)
		}
	}
	ctx, sp := tracing.Start(tracing.Extract(ctx, h), "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tracing.AttrTool.String(tool)))
	return ctx, func() { sp.End() }
}
