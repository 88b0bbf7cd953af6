package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// logStats is the size of a session log as counted against the limits.
type logStats struct {
	events int
	bytes  int64
}

// scan reads the session log up to and including sequence upTo, in order,
// calling fn for every message (headers only when headersOnly, with the
// payload size in size). It stops at the first error fn returns.
func (t *Topology) scan(ctx context.Context, session string, upTo uint64, headersOnly bool, fn func(m jetstream.Msg, seq uint64, size int) error) error {
	return t.scanFrom(ctx, session, 1, upTo, headersOnly, fn)
}

// scanFrom is scan starting at stream sequence from.
func (t *Topology) scanFrom(ctx context.Context, session string, from, upTo uint64, headersOnly bool, fn func(m jetstream.Msg, seq uint64, size int) error) error {
	deliver := jetstream.DeliverAllPolicy
	if from > 1 {
		deliver = jetstream.DeliverByStartSequencePolicy
	}
	cons, err := t.JS.OrderedConsumer(ctx, t.Events.CachedInfo().Config.Name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{t.EventsSubject(session)},
		DeliverPolicy:  deliver,
		OptStartSeq:    from,
		HeadersOnly:    headersOnly,
		// A safety net only: the consumer is deleted when the scan ends.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("stream: read %s: %w", session, err)
	}
	// Stop does not delete an ordered consumer, and a stream allows 1,000
	// consumers by default: without the delete, a few hundred loads a
	// second would exhaust them (JetStream error 10026).
	defer deleteOrdered(t.Events, cons)
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("stream: read %s: %w", session, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("stream: read %s: %w", session, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("stream: read %s: %w", session, err)
		}
		seq := md.Sequence.Stream
		size := len(m.Data())
		if headersOnly {
			size, _ = strconv.Atoi(m.Headers().Get("Nats-Msg-Size"))
		}
		if err := fn(m, seq, size); err != nil {
			return err
		}
		if seq >= upTo || md.NumPending == 0 {
			return nil
		}
	}
}

// measure counts the events and serialized bytes of the session log up to
// seq upTo, stopping early once a limit is passed.
func (t *Topology) measure(ctx context.Context, session string, upTo uint64) (logStats, error) {
	var st logStats
	lim := t.cfg.Limits
	errOver := errors.New("over")
	err := t.scan(ctx, session, upTo, true, func(_ jetstream.Msg, seq uint64, size int) error {
		st.events++
		st.bytes += eventSize(size, seq)
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
// with Seq filled from the stream. Call it after Fence for a confirmed
// history. A log over the limits (Topology.Limits; 100,000 events or 16 MiB
// serialized) is refused with a history_too_large *schema.Error, an event
// that does not decode with a corrupt_history one naming its seq. An empty
// or unknown session has an empty history.
func (t *Topology) Load(ctx context.Context, session string) ([]schema.Event, error) {
	if err := ValidateSession(session); err != nil {
		return nil, err
	}
	tl, ok, err := t.lastMsg(ctx, session)
	if err != nil || !ok {
		return nil, err
	}
	lim := t.cfg.Limits
	var (
		out   []schema.Event
		bytes int64
	)
	add := func(data []byte, seq uint64, size int) error {
		bytes += eventSize(size, seq)
		if len(out)+1 > lim.MaxEvents {
			return schema.Errorf(schema.CodeHistoryTooLarge, "session %s has more than %d events (limit)", session, lim.MaxEvents)
		}
		if bytes > lim.MaxBytes {
			return schema.Errorf(schema.CodeHistoryTooLarge, "session %s is larger than %d bytes serialized (limit)", session, lim.MaxBytes)
		}
		ev, err := schema.DecodeEvent(data)
		if err != nil {
			var se *schema.Error
			if errors.As(err, &se) {
				return &schema.Error{Code: se.Code, Message: fmt.Sprintf("session %s seq %d: %s", session, seq, se.Message)}
			}
			return schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, seq, err)
		}
		ev.Seq = seq
		out = append(out, ev)
		return nil
	}
	// Most logs a recovery worker loads are short: a few direct message
	// gets cost the server far less than a consumer (created, pulled from,
	// deleted). A longer log goes on through a consumer from where the gets
	// stopped.
	next := uint64(1)
	for range shortLog {
		m, err := t.Events.GetMsg(ctx, next, jetstream.WithGetMsgSubject(t.EventsSubject(session)))
		if err != nil {
			return nil, fmt.Errorf("stream: read %s at %d: %w", session, next, err)
		}
		if m.Sequence > tl.seq {
			return out, nil
		}
		if err := add(m.Data, m.Sequence, len(m.Data)); err != nil {
			return nil, err
		}
		if m.Sequence == tl.seq {
			return out, nil
		}
		next = m.Sequence + 1
	}
	err = t.scanFrom(ctx, session, next, tl.seq, false, func(m jetstream.Msg, seq uint64, size int) error {
		return add(m.Data(), seq, size)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// shortLog is how many events Load reads with single message gets before
// it reads the rest of a log through a consumer.
const shortLog = 8

// deleteOrdered deletes the server-side consumer behind an ordered consumer
// once it is no longer read, best effort (the consumer's InactiveThreshold
// removes it anyway if this fails).
func deleteOrdered(st jetstream.Stream, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = st.DeleteConsumer(ctx, info.Name)
}
