package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// idHole is the placeholder the fill templates carry where a call number
// goes; it is replaced by a zero-padded number of the same width.
const idHole = "XXXXXXXXXX"

// fillSpec describes pre-filled session logs.
type fillSpec struct {
	// sessions named <name>-<i>, events spread evenly over them.
	name     string
	sessions int
	// events of finished calls in total, at least: three per call
	// (tool.call with start marker, tool.started, tool.result ok), rounded
	// up to whole calls in every session.
	events int
	// open sessions (the first ones) end with one more call that is
	// started but has no result.
	open int
	// interleave writes the sessions' calls round-robin, call by call
	// (session 0's first call, session 1's first call, …, session 0's
	// second call, …), as a fleet of agents writes them; otherwise each
	// session's calls are written together, one session after the other.
	interleave bool
}

// filled is what fill wrote.
type filled struct {
	lastSeq uint64
	events  int
	calls   int // finished calls
	open    []string
}

// callTemplates returns the encoded tool.call, tool.started and
// tool.result of one finished call in session, with idHole where the call
// number goes.
func callTemplates(session string) ([][]byte, error) {
	id, key := "c-"+idHole, "op-"+idHole
	contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	evs := []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: key, Contract: contract}}},
		{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
		{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK, Output: json.RawMessage(`{"order_id":"o-1"}`)}},
	}
	out := make([][]byte, len(evs))
	for i, ev := range evs {
		b, err := encodeFor(ev, session)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// fill publishes the spec's events with async publishes in batches (the
// fastest way in; not measured) and returns the last stream sequence.
func fill(ctx context.Context, nc *nats.Conn, topo *stream.Topology, spec fillSpec) (filled, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return filled{}, err
	}
	var f filled
	perSession := (spec.events + 3*spec.sessions - 1) / (3 * spec.sessions)
	const batch = 2000
	var futures []jetstream.PubAckFuture
	flush := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return fmt.Errorf("fill: publishes not acknowledged within a minute")
		}
		for _, fu := range futures {
			select {
			case ack := <-fu.Ok():
				f.lastSeq = max(f.lastSeq, ack.Sequence)
			case err := <-fu.Err():
				return fmt.Errorf("fill: %w", err)
			}
		}
		futures = futures[:0]
		return nil
	}
	pub := func(subj string, b []byte) error {
		fu, err := js.PublishAsync(subj, b)
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		futures = append(futures, fu)
		f.events++
		if len(futures) >= batch {
			return flush()
		}
		return nil
	}
	hole := []byte(idHole)
	type sessionFill struct {
		name, subj string
		tpl        [][]byte
		calls      int
	}
	sessions := make([]sessionFill, spec.sessions)
	for s := range sessions {
		session := fmt.Sprintf("%s-%d", spec.name, s)
		tpl, err := callTemplates(session)
		if err != nil {
			return filled{}, err
		}
		sessions[s] = sessionFill{name: session, subj: topo.Names().EventsSubject(session), tpl: tpl, calls: perSession}
		if s < spec.open {
			sessions[s].calls++
		}
	}
	// call writes call c of session s.
	call := func(s *sessionFill, c int) error {
		num := []byte(fmt.Sprintf("%010d", c))
		evs := s.tpl
		if c == perSession { // the open call: no result
			evs = s.tpl[:2]
			f.open = append(f.open, s.name)
		} else {
			f.calls++
		}
		for _, t := range evs {
			if err := pub(s.subj, bytes.ReplaceAll(t, hole, num)); err != nil {
				return err
			}
		}
		return nil
	}
	if spec.interleave {
		for c := range perSession + 1 {
			for s := range sessions {
				if c < sessions[s].calls {
					if err := call(&sessions[s], c); err != nil {
						return filled{}, err
					}
				}
			}
		}
		return f, flush()
	}
	for s := range sessions {
		for c := range sessions[s].calls {
			if err := call(&sessions[s], c); err != nil {
				return filled{}, err
			}
		}
	}
	return f, flush()
}

// ackFloor polls the durable consumer name on streamName until its ack
// floor reaches seq, and returns how long that took from the consumer's
// creation (the server's timestamp; same machine). The consumer may not
// exist yet when it is called; an info request that times out is asked
// again.
//
// alive, when not nil, is checked on every poll; its error ends the wait.
func ackFloor(ctx context.Context, js jetstream.JetStream, streamName, name string, seq uint64, every time.Duration, alive func() error) (time.Duration, error) {
	var created time.Time
	err := waitFor(ctx, every, func() (bool, error) {
		if alive != nil {
			if err := alive(); err != nil {
				return false, err
			}
		}
		c, err := js.Consumer(ctx, streamName, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, nil
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The info request timed out (a server busy storing): ask
			// again; a slow answer only lengthens the wait it measures.
			return false, nil
		}
		if err != nil {
			return false, err
		}
		info := c.CachedInfo()
		created = info.Created
		return info.AckFloor.Stream >= seq, nil
	})
	if err != nil {
		return 0, fmt.Errorf("consumer %s: %w", name, err)
	}
	return time.Since(created), nil
}
