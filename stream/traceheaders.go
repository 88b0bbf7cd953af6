package stream

import (
	"context"

	"github.com/nats-io/nats.go"
)

// EventHeaders returns the NATS headers stored with the session-log
// message at stream sequence seq of session (nil, nil when seq holds no
// message of that session). Headers are not part of the event: a
// recovery worker reads the trace context a call's writer put on its
// tool.call from here, to link its spans to the call's.
func (ls Logs) EventHeaders(ctx context.Context, session string, seq uint64) (nats.Header, error) {
	t := ls.t
	m, ok, err := t.Reader().leaderGet(ctx, t.Events.CachedInfo().Config.Name, msgGetRequest{Seq: seq, NextFor: t.Names().EventsSubject(session)})
	if err != nil || !ok || m.Sequence != seq {
		return nil, err
	}
	return m.Header, nil
}

// HeadersAt returns the NATS headers stored with the message at stream
// sequence seq of l's session log (see Logs.EventHeaders).
func (l *Log) HeadersAt(ctx context.Context, seq uint64) (nats.Header, error) {
	return l.t.Logs().EventHeaders(ctx, l.session, seq)
}

// HeadersAt returns the NATS headers stored with the message at stream
// sequence seq of the guarded session log (see Logs.EventHeaders).
func (g *GuardedLog) HeadersAt(ctx context.Context, seq uint64) (nats.Header, error) {
	return g.log.HeadersAt(ctx, seq)
}
