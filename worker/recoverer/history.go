package recoverer

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// openIn returns the calls of a loaded history that are open at its end
// (or, with before > 0, just before the event at sequence before): calls
// without a result that no session.fenced of a newer epoch has closed. These
// are the calls a running writer may still finish; the rest are confirmed.
func openIn(h []schema.Event, before uint64) []string {
	type st struct {
		epoch uint64
		idx   int
	}
	open := map[string]st{}
	var order []string
	for _, ev := range h {
		if before > 0 && ev.Seq >= before {
			break
		}
		switch {
		case ev.Call != nil && ev.Type == schema.TypeCall:
			open[ev.Call.CallID] = st{ev.Epoch, len(order)}
			order = append(order, ev.Call.CallID)
		case ev.Result != nil && ev.Type == schema.TypeResult:
			delete(open, ev.Result.CallID)
		case ev.Fence != nil && ev.Type == schema.TypeFenced:
			for id, s := range open {
				if s.epoch < ev.Fence.Epoch {
					delete(open, id)
				}
			}
		}
	}
	out := make([]string, 0, len(open))
	for _, id := range order {
		if _, ok := open[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// isOpen reports whether callID is among the open calls of h.
func isOpen(h []schema.Event, callID string) bool {
	for _, id := range openIn(h, 0) {
		if id == callID {
			return true
		}
	}
	return false
}

// smallHistory is the most events loadHistory reads with single message
// gets before it leaves the session to stream.Load.
const smallHistory = 8

// loadHistory returns the session's history as stream.Topology.Load does.
// A short log (up to smallHistory events, well inside the limits, every
// event decoding) is read with one get of the last message and one get per
// event (next message on the session's subject from the stream leader),
// which costs the server far less than Load's ordered consumer (created,
// pulled from, dropped later): prepare makes many such loads when
// recoverers race. Anything else — a longer or larger log, an event that
// does not decode, a failed get — is left to Load, so its limits and
// errors apply unchanged. The history ends at the last message read first,
// as Load's does.
func (r *Recoverer) loadHistory(ctx context.Context, session string) ([]schema.Event, error) {
	return r.loadFrom(ctx, session, r.readStart(ctx, session))
}

// historyStart holds the first two reads of loadHistory, the session's
// last and first messages: they need nothing else, so prepare runs them
// alongside its other first reads.
type historyStart struct {
	last, first       *jetstream.RawStreamMsg
	lastErr, firstErr error
}

// readStart reads the session's last and first messages at once.
func (r *Recoverer) readStart(ctx context.Context, session string) historyStart {
	var st historyStart
	if !schema.ValidSession(session) {
		return st
	}
	subj := r.t.EventsSubject(session)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		st.first, st.firstErr = r.t.Events.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	}()
	st.last, st.lastErr = r.t.Events.GetLastMsgForSubject(ctx, subj)
	wg.Wait()
	return st
}

// loadFrom is loadHistory after readStart.
func (r *Recoverer) loadFrom(ctx context.Context, session string, st historyStart) ([]schema.Event, error) {
	if !schema.ValidSession(session) {
		return r.t.Load(ctx, session)
	}
	if errors.Is(st.lastErr, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if st.lastErr != nil {
		return r.t.Load(ctx, session)
	}
	subj := r.t.EventsSubject(session)
	lim := r.t.Limits()
	var (
		out  []schema.Event
		size int64
	)
	m, err := st.first, st.firstErr
	for len(out) < smallHistory {
		if err != nil || m.Sequence > st.last.Sequence {
			break
		}
		size += int64(len(m.Data)) + 32
		if len(out)+1 > lim.MaxEvents/2 || size > lim.MaxBytes/2 {
			break
		}
		ev, derr := schema.DecodeEvent(m.Data)
		if derr != nil {
			break
		}
		ev.Seq = m.Sequence
		out = append(out, ev)
		if m.Sequence == st.last.Sequence {
			return out, nil
		}
		m, err = r.t.Events.GetMsg(ctx, m.Sequence+1, jetstream.WithGetMsgSubject(subj))
	}
	return r.t.Load(ctx, session)
}
