package stream

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// errPageDone ends ReadLog's range read when its fn asks for no more.
var errPageDone = errors.New("stream: page done")

// ReadLog calls fn, in stream order, with the stored bytes of every event
// of session's log from stream sequence from on (0 and 1: the first), up
// to end: the last message the stream leader holds for the session when
// ReadLog starts (0 for an empty or unknown session). It stops early,
// without error, when fn returns false. The bytes are the message as
// stored, not decoded and not checked: a reader that serves them on (the
// recovery worker's jw.api.history) passes on exactly what the log holds.
// Like Load it reads the leader's tail and the body with batched direct
// gets, no consumer, and never returns a message the leader does not
// hold. data is the caller's to keep.
func (lg Logs) ReadLog(ctx context.Context, session string, from uint64, fn func(seq uint64, data []byte) bool) (end uint64, err error) {
	t := lg.t
	if err := ValidateSession(session); err != nil {
		return 0, err
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil || !ok {
		return 0, err
	}
	end = tl.seq
	if max(from, 1) > end {
		return end, nil
	}
	err = t.Reader().readRange(ctx, t.Events.CachedInfo().Config.Name, t.Names().EventsSubject(session), max(from, 1), end, func(m *jetstream.RawStreamMsg) error {
		if !fn(m.Sequence, m.Data) {
			return errPageDone
		}
		return nil
	})
	if errors.Is(err, errPageDone) {
		err = nil
	}
	return end, err
}
