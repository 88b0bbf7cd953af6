package console

import (
	"context"
	"net/url"
	"strings"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/stream"
)

// traceURL returns the trace UI address of the call whose tool.call is at
// seq of session (Config.TraceURL with {trace_id} replaced by the trace id
// its message's traceparent header carries), or "" when no address is
// configured or the message carries no trace context.
func (c *Console) traceURL(ctx context.Context, topo *stream.Topology, session string, seq uint64) string {
	if c.cfg.TraceURL == "" || seq == 0 {
		return ""
	}
	hctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	h, err := topo.Logs().EventHeaders(hctx, session, seq)
	if err != nil {
		return ""
	}
	id := tracing.TraceIDOf(h)
	if id == "" {
		return ""
	}
	return strings.ReplaceAll(c.cfg.TraceURL, "{trace_id}", url.PathEscape(id))
}
