package recoverer

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// asyncAcks is the classifier's async publishing of assessments: each
// message is published with a reply subject on an inbox of the run's own
// (<inbox>.<n>), the server's PubAck for it lands in a ring slot, and the
// classifier settles its publishes in order before it acknowledges the
// events they came from. A publish whose ack reports anything but a
// stored message (an error reply, no responders), or never comes (a
// reconnect in between, ackTimeout), is re-sent synchronously, the same
// bytes, with its id as Nats-Msg-Id (an assessment's, or a batch's id of
// its bytes, batchMsgID) (publisher.publishSync, which retries).
//
// It does what jetstream's PublishMsgAsync did with less: that path parsed
// every PubAck with encoding/json into a fresh struct and signalled two
// channels per publish, about a third of the CPU the classifier spent per
// assessment. Here an ack is checked by its bytes (a PubAck has "seq" and
// no "error" member) and one channel wakes the waiting classifier.
//
// At most maxInFlight publishes are unsettled: the next one first settles
// the oldest (normally acknowledged by then). Only the classifier's run
// goroutine calls publish and settleThrough; the subscription's handler
// writes the slots.
type asyncAcks struct {
	p      *publisher
	nc     *nats.Conn
	prefix string // <inbox>.
	sub    *nats.Subscription
	// slots[n%len] holds n<<2 | state for publish n while it is in flight.
	slots []atomic.Uint64
	wake  chan struct{} // a slot was resolved
	next  uint64        // number of the next publish (from 1)
	queue []pending     // unsettled publishes, oldest first
	head  int           // queue[head:] are unsettled
	// ackTimeout bounds the wait for one publish's ack before it is
	// re-sent.
	ackTimeout time.Duration
}

// States of a publish in its slot.
const (
	ackWaiting  = 0
	ackStored   = 1
	ackRefused  = 2 // an error reply (the message is not stored)
	ackNoStream = 3 // no responders: nothing stored it
)

// maxInFlight is how many async assessment publishes (messages: one
// assessment, or a batch of them) may be unsettled.
const maxInFlight = 512

// ackTimeout is how long a publish's ack is waited for before the
// assessment is re-sent (a PubAck lost on a connection that died).
const ackTimeout = 5 * time.Second

// newAsyncAcks subscribes the inbox that collects the acks; close
// unsubscribes it.
func (p *publisher) newAsyncAcks() (*asyncAcks, error) {
	nc := p.t.JS.Conn()
	a := &asyncAcks{p: p, nc: nc, prefix: nc.NewInbox() + ".", slots: make([]atomic.Uint64, maxInFlight), wake: make(chan struct{}, 1), next: 1, ackTimeout: ackTimeout}
	sub, err := nc.Subscribe(a.prefix+"*", a.handle)
	if err != nil {
		return nil, fmt.Errorf("assessment acks: %w", err)
	}
	a.sub = sub
	return a, nil
}

func (a *asyncAcks) close() { _ = a.sub.Unsubscribe() }

// handle records one PubAck. An ack of a publish no longer in flight (one
// re-sent after a timeout) finds its slot taken and is dropped.
func (a *asyncAcks) handle(m *nats.Msg) {
	n, err := strconv.ParseUint(m.Subject[len(a.prefix):], 10, 64)
	if err != nil || n == 0 {
		return
	}
	if a.slots[n%uint64(len(a.slots))].CompareAndSwap(n<<2|ackWaiting, n<<2|ackState(m)) {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

var (
	ackSeq   = []byte(`"seq":`)
	ackError = []byte(`"error":`)
)

// ackState reads a PubAck: {"stream":…,"seq":…} (with "duplicate" or
// "domain" at times) when the message is stored; {"error":{…}} when it is
// refused; an empty message with a 503 status when no stream listens.
// Anything else counts as refused (and the assessment is re-sent, which
// decides for good).
func ackState(m *nats.Msg) uint64 {
	switch {
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		return ackNoStream
	case bytes.Contains(m.Data, ackError) || !bytes.Contains(m.Data, ackSeq):
		return ackRefused
	}
	return ackStored
}

// publish sends msg (an assessment or a batch whose id is id, with
// dedup also as its Nats-Msg-Id) and returns its number, for
// settleThrough.
func (a *asyncAcks) publish(ctx context.Context, msg *nats.Msg, id string, dedup bool) (uint64, error) {
	if len(a.queue)-a.head >= maxInFlight {
		if err := a.settleThrough(ctx, a.queue[a.head].n); err != nil {
			return 0, err
		}
	}
	n := a.next
	a.next++
	if dedup {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	msg.Reply = a.prefix + strconv.FormatUint(n, 10)
	a.slots[n%uint64(len(a.slots))].Store(n<<2 | ackWaiting)
	reconnects := a.nc.Stats().Reconnects
	if err := a.nc.PublishMsg(msg); err != nil {
		return 0, fmt.Errorf("publish assessment: %w", err)
	}
	if a.head > 0 && a.head >= len(a.queue)/2 { // drop the settled ones
		k := copy(a.queue, a.queue[a.head:])
		clear(a.queue[k:])
		a.queue, a.head = a.queue[:k], 0
	}
	a.queue = append(a.queue, pending{msg: msg, id: id, n: n, reconnects: reconnects})
	return n, nil
}

// settleThrough waits for the acks of every publish up to number upTo (0:
// none) and re-sends, synchronously, those not stored.
func (a *asyncAcks) settleThrough(ctx context.Context, upTo uint64) error {
	for a.head < len(a.queue) && a.queue[a.head].n <= upTo {
		q := &a.queue[a.head]
		state, err := a.await(ctx, q)
		if err != nil {
			return err
		}
		if state != ackStored {
			id := q.id
			a.p.log.Warn().Str("subject", q.msg.Subject).Str("ack", ackWhy(state)).Int("assessments", len(q.msg.Header.Values(HeaderAssessmentID))).Msg("assessment publish not stored; re-sending")
			if err := a.p.publishSync(ctx, q.msg, id); err != nil {
				return err
			}
		}
		*q = pending{}
		a.head++
	}
	return nil
}

// await waits for q's ack and returns its state: ackWaiting if it is not
// coming (the connection reconnected since the publish, or ackTimeout
// passed).
func (a *asyncAcks) await(ctx context.Context, q *pending) (uint64, error) {
	slot := &a.slots[q.n%uint64(len(a.slots))]
	if v := slot.Load(); v>>2 == q.n && v&3 != ackWaiting {
		return v & 3, nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(a.ackTimeout)
	for {
		if v := slot.Load(); v>>2 == q.n && v&3 != ackWaiting {
			return v & 3, nil
		}
		select {
		case <-a.wake:
		case <-tick.C:
			if a.reconnected(q) || time.Now().After(deadline) {
				// Taken back from the handler, so a late ack cannot
				// count for it (or for the next publish in the slot).
				if slot.CompareAndSwap(q.n<<2|ackWaiting, 0) {
					return ackWaiting, nil
				}
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// reconnected reports whether the connection reconnected since q was
// published: its ack, if the server sent one, went to the old connection.
func (a *asyncAcks) reconnected(q *pending) bool {
	return a.nc.Stats().Reconnects != q.reconnects
}

func ackWhy(state uint64) string {
	switch state {
	case ackRefused:
		return "refused"
	case ackNoStream:
		return "no stream responded"
	}
	return "no ack"
}
