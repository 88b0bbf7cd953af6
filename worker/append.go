// Appending events to the session log, and the ids calls get.

package worker

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"time"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// writeContext returns a context for one write: it keeps ctx's values but
// not its cancellation, and ends after WriteTimeout.
func (r *Runtime) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
}

// append stamps and appends one event under its own write context (see
// writeContext); a fenced log fences the runtime. A *stream.Log is given
// the bound instead (AppendFor: the same bound without a context made
// per append). Only the Log itself: an Appender that wraps one (embeds
// it, overriding Append) has its own Append called.
func (r *Runtime) append(ctx context.Context, ev schema.Event) (uint64, error) {
	return r.appendOf(ctx, ev, "")
}

// appendOf is append of an event of a call of tool ("" unknown), which a
// ResultObserver is told.
func (r *Runtime) appendOf(ctx context.Context, ev schema.Event, tool string) (uint64, error) {
	ev.V, ev.Session = schema.Version, r.cfg.Session
	if ev.At.IsZero() { // a retried event keeps its first stamp
		ev.At = r.cfg.Now().UTC()
	}
	var start time.Time
	if r.cfg.Observer != nil {
		start = time.Now()
	}
	var seq uint64
	var err error
	if tracing.Enabled() { // see worker/tracing.go
		if ctx2, endSend := r.startAppendSpan(ctx, &ev); endSend != nil {
			ctx = ctx2
			defer func() { endSend(seq, err) }()
		}
	}
	if l, ok := r.cfg.Log.(*stream.Log); ok {
		seq, err = l.AppendFor(ctx, ev, r.cfg.WriteTimeout)
	} else {
		wctx, cancel := r.writeContext(ctx)
		seq, err = r.cfg.Log.Append(wctx, ev)
		cancel()
	}
	if o, ok := r.cfg.Observer.(ResultObserver); ok && ev.Result != nil {
		o.AppendedResult(ev, tool, time.Since(start), err)
	} else if o := r.cfg.Observer; o != nil {
		o.Appended(ev, time.Since(start), err)
	}
	if err == nil {
		return seq, nil
	}
	if errors.Is(err, stream.ErrFenced) {
		r.fenced.Store(true)
		return 0, &schema.Error{Code: schema.CodeFenced, CallID: ev.CallID(), Message: "session " + r.cfg.Session + " was taken over", Err: err}
	}
	return 0, &schema.Error{Code: schema.CodeLog, CallID: ev.CallID(), Message: "append " + ev.Type + ": " + err.Error(), Err: err}
}

// randomID returns prefix and 32 hex digits from crypto/rand.
func randomID(prefix string) string {
	var b [defaultRandomIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hexID(prefix, b[:])
}

// randomIDs is two randomIDs (a call id and an operation key) from one
// read of crypto/rand.
func randomIDs(prefix1, prefix2 string) (string, string) {
	var b [2 * defaultRandomIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hexID(prefix1, b[:defaultRandomIDBytes]), hexID(prefix2, b[defaultRandomIDBytes:])
}

// hexID returns prefix and b in lower-case hex, in one allocation.
func hexID(prefix string, b []byte) string {
	const hex = "0123456789abcdef"
	var out strings.Builder
	out.Grow(len(prefix) + 2*len(b))
	out.WriteString(prefix)
	for _, c := range b {
		out.WriteByte(hex[c>>4])
		out.WriteByte(hex[c&15])
	}
	return out.String()
}
