package recoverer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// decoded is one delivery as the prefetcher hands it to the classifier:
// the message, its delivery metadata and its event decoded (or
// DecodeEvent's error, which the tracker judges).
type decoded struct {
	m   jetstream.Msg
	d   delivery
	ev  schema.Event
	err error
}

// prefetch reads the events consumer's messages and decodes them on a
// goroutine of its own, in delivery order, while the classifier's run
// goroutine tracks, publishes and acknowledges the ones before: decoding
// is more than half the classifier's CPU per event, and with it off the
// run goroutine the two share the machine's cores. It changes no
// decision: every event still reaches the tracker, in order, and the run
// goroutine alone checks the deliveries, acknowledges and decides.
//
// Deliveries are handed over in slices: one as soon as the classifier
// waits (the channel is empty), else up to prefetchBatch, and always at a
// delivery that leaves nothing pending, so no event is held back when
// the consumer has nothing more to deliver. A delivery held in a slice
// while the consumer stalls is unacknowledged and comes again after the
// restart, like one still in the pull's buffer.
type prefetch struct {
	ch     chan []decoded // closed when the reader ends; err says why
	free   chan []decoded // slices the classifier is done with
	done   chan struct{}
	cancel context.CancelFunc
	err    error // the iterator's error; read after ch is closed
	// q and i are the slice the classifier is reading (run goroutine).
	q []decoded
	i int
}

// prefetchBatch bounds a slice of deliveries handed over at once.
const prefetchBatch = 64

func startPrefetch(ctx context.Context, it jetstream.MessagesContext) *prefetch {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetch{ch: make(chan []decoded, maxAckPending/prefetchBatch), free: make(chan []decoded, maxAckPending/prefetchBatch+2), done: make(chan struct{}), cancel: cancel}
	go p.read(ctx, it)
	return p
}

// stop ends the reader and waits for it.
func (p *prefetch) stop() {
	p.cancel()
	<-p.done
}

func (p *prefetch) read(ctx context.Context, it jetstream.MessagesContext) {
	defer close(p.done)
	defer close(p.ch)
	var b []decoded
	hand := func() bool {
		select {
		case p.ch <- b:
			b = nil
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if len(b) > 0 {
				hand()
			}
			p.err = err
			return
		}
		d, err := deliveryOf(m)
		if err != nil {
			if len(b) > 0 {
				hand()
			}
			p.err = fmt.Errorf("events consumer: %w", err)
			return
		}
		if b == nil {
			select {
			case b = <-p.free:
			default:
				b = make([]decoded, 0, prefetchBatch)
			}
		}
		ev, derr := schema.DecodeEvent(m.Data())
		b = append(b, decoded{m: m, d: d, ev: ev, err: derr})
		if len(b) >= prefetchBatch || d.pending == 0 || len(p.ch) == 0 {
			if !hand() {
				p.err = ctx.Err()
				return
			}
		}
	}
}

// next returns the next delivery, waiting until wait ends (its error
// then); once the reader has ended, its error.
func (p *prefetch) next(wait context.Context) (*decoded, error) {
	if p.i == len(p.q) {
		if p.q != nil {
			clear(p.q) // drop the messages and events
			select {
			case p.free <- p.q[:0]:
			default:
			}
			p.q, p.i = nil, 0
		}
		select {
		case q, ok := <-p.ch:
			if !ok {
				return nil, p.err
			}
			p.q, p.i = q, 0
		case <-wait.Done():
			return nil, wait.Err()
		}
	}
	d := &p.q[p.i]
	p.i++
	return d, nil
}
