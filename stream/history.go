package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Logs is the handle on the session logs (JW_EVENTS): open, fence and load
// a session's log. Get it with Topology.Logs.
type Logs struct{ t *Topology }

// logStats is the size of a session log as counted against the limits.
type logStats struct {
	events int
	bytes  int64
}

// measure counts the events and serialized bytes of the session log up to
// seq upTo, stopping early once a limit is passed.
func (lg Logs) measure(ctx context.Context, session string, upTo uint64) (logStats, error) {
	t := lg.t
	var st logStats
	lim := t.cfg.Limits
	errOver := errors.New("over")
	err := t.Reader().readRange(ctx, t.Events.CachedInfo().Config.Name, t.Names().EventsSubject(session), 1, upTo, func(m *jetstream.RawStreamMsg) error {
		st.events++
		st.bytes += eventSize(len(m.Data), m.Sequence)
		if st.events > lim.MaxEvents || st.bytes > lim.MaxBytes {
			return errOver
		}
		return nil
	})
	if err != nil && !errors.Is(err, errOver) {
		return st, err
	}
	return st, nil
}

// Load returns the session's history: every event on its log in order,
// with Seq filled from the stream, up to the last message the stream leader
// holds for the session when Load starts. Call it after Fence for a
// confirmed history (LoadThrough with the fence's sequence makes sure the
// read reaches it). A log over the limits (Topology.Limits; 100,000 events
// or 16 MiB serialized) is refused with a history_too_large *schema.Error,
// an event that does not decode with a corrupt_history one naming its seq.
// An empty or unknown session has an empty history.
func (lg Logs) Load(ctx context.Context, session string) ([]schema.Event, error) {
	return lg.LoadThrough(ctx, session, 0)
}

// LoadThrough is Load that also makes sure the history reaches sequence
// atLeast (a fence the caller appended): a read that comes back short of
// it, on any replica, is retried or fails, and is never returned. With
// atLeast 0 it is Load.
func (lg Logs) LoadThrough(ctx context.Context, session string, atLeast uint64) ([]schema.Event, error) {
	h, _, err := lg.load(ctx, session, atLeast)
	return h, err
}

// load is LoadThrough that also returns the size of what it read.
func (lg Logs) load(ctx context.Context, session string, atLeast uint64) ([]schema.Event, logStats, error) {
	return lg.loadAfter(ctx, session, atLeast, Loaded{})
}

// loadAfter is load that starts from a history loaded before (prefix):
// only the events after it are read, and the limits count the prefix too.
// An empty prefix reads the whole log.
func (lg Logs) loadAfter(ctx context.Context, session string, atLeast uint64, prefix Loaded) ([]schema.Event, logStats, error) {
	t := lg.t
	if err := ValidateSession(session); err != nil {
		return nil, logStats{}, err
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil {
		return nil, logStats{}, err
	}
	end := tl.seq
	switch {
	case !ok && atLeast == 0:
		return nil, logStats{}, nil
	case end < atLeast:
		return nil, logStats{}, fmt.Errorf("stream: session %s: the stream leader's log ends at seq %d, before seq %d that was appended to it", session, end, atLeast)
	}
	acc, from := prefix, uint64(1)
	if n := len(acc.Events); n > 0 {
		acc.Events, from = slices.Clip(acc.Events), acc.Events[n-1].Seq+1
	}
	if from <= end {
		err = t.Reader().readRange(ctx, t.Events.CachedInfo().Config.Name, t.Names().EventsSubject(session), from, end, func(m *jetstream.RawStreamMsg) error {
			return acc.add(session, t.cfg.Limits, m)
		})
		if err != nil {
			return nil, logStats{}, err
		}
	}
	out := acc.Events
	if n := len(out); n == 0 || out[n-1].Seq != end {
		return nil, logStats{}, fmt.Errorf("stream: session %s: read stopped before seq %d", session, end)
	}
	return out, logStats{events: len(out), bytes: acc.bytes}, nil
}

// add decodes m, the next stored event of session, onto l, once it is
// counted against lim: one event more than MaxEvents, or a serialized
// size over MaxBytes, is history_too_large and adds nothing.
func (l *Loaded) add(session string, lim schema.Limits, m *jetstream.RawStreamMsg) error {
	if len(l.Events)+1 > lim.MaxEvents {
		return schema.Errorf(schema.CodeHistoryTooLarge, "session %s has more than %d events (limit)", session, lim.MaxEvents)
	}
	bytes := l.bytes + eventSize(len(m.Data), m.Sequence)
	if bytes > lim.MaxBytes {
		return schema.Errorf(schema.CodeHistoryTooLarge, "session %s is larger than %d bytes serialized (limit)", session, lim.MaxBytes)
	}
	ev, err := decodeAt(session, m)
	if err != nil {
		return err
	}
	l.Events, l.bytes = append(l.Events, ev), bytes
	return nil
}

// Loaded is a session history as LoadHistory read it, with what it weighs
// against the limits, so that a takeover right after can read only what
// follows it (WithLoaded) instead of the whole log again. The zero value
// is an empty history.
type Loaded struct {
	// Events are the history's events, as Load returns them.
	Events []schema.Event
	bytes  int64
}

// LoadHistory is Load, returning the history as a Loaded.
func (lg Logs) LoadHistory(ctx context.Context, session string) (Loaded, error) {
	h, st, err := lg.load(ctx, session, 0)
	if err != nil {
		return Loaded{}, err
	}
	return Loaded{Events: h, bytes: st.bytes}, nil
}

// LoadFrom returns the events of the session log from stream sequence
// from on, up to the last message the stream leader holds for the session
// when LoadFrom starts, decoded as Load decodes them (a corrupt event is a
// corrupt_history *schema.Error naming its seq). It is how a reader follows
// a log it has read up to from-1: only stored events, never a message
// JetStream refused. The history limits are not applied to a part.
func (lg Logs) LoadFrom(ctx context.Context, session string, from uint64) ([]schema.Event, error) {
	t := lg.t
	if err := ValidateSession(session); err != nil {
		return nil, err
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil || !ok || tl.seq < max(from, 1) {
		return nil, err
	}
	var out []schema.Event
	err = t.Reader().readRange(ctx, t.Events.CachedInfo().Config.Name, t.Names().EventsSubject(session), max(from, 1), tl.seq, func(m *jetstream.RawStreamMsg) error {
		ev, err := decodeAt(session, m)
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	return out, err
}

// decodeAt decodes a stored session event and stamps its seq; a decode
// error becomes a *schema.Error naming the session and seq.
func decodeAt(session string, m *jetstream.RawStreamMsg) (schema.Event, error) {
	ev, err := schema.DecodeEvent(m.Data)
	if err != nil {
		var se *schema.Error
		if errors.As(err, &se) {
			return schema.Event{}, &schema.Error{Code: se.Code, Message: fmt.Sprintf("session %s seq %d: %s", session, m.Sequence, se.Message)}
		}
		return schema.Event{}, schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, m.Sequence, err)
	}
	ev.Seq = m.Sequence
	return ev, nil
}
