package recoverer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// classifyRun is one run of the classifier's loop over its durable
// consumer: the loop is its stages called in order for every event —
// next (fetch, and watch for a stalled consumer), admit (route: this
// consumer's next delivery, or dropped, or a gap that ends the run),
// observe (the tracker), assess and publish (each finding), ack (batch and
// settle). Only the run goroutine uses it.
//
// The deliveries of a run must be consecutive: the consumer numbers them
// (the consumer sequence), and one that never arrives — lost with a
// connection to a node that died, or to a pull the server answered after
// the client gave it up — is pending on the server but was never
// classified. AckAll would acknowledge it with the next batch and its call
// would never be assessed (or be closed by a fence as never started). So
// the run ends at the first gap, the events before it settled and
// acknowledged, and the next run starts from the ack floor (start resets
// the consumer), where the lost events come again.
//
// Batches are pipelined: when a batch is full its publishes are left in
// flight and the previous batch (whose acks have normally arrived) is
// settled and its last event acknowledged (AckAll covers the earlier
// ones). When nothing is pending everything is settled. The assessments of
// results are grouped per session over a batch of events (grouped); they
// are published when the batch is settled, or before, when a session's is
// full or a fence's assessment of the same session follows.
type classifyRun struct {
	c    *classifier
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	acks *asyncAcks

	// ownStream and ownName are the consumer's: a delivery naming another
	// is not an event of the log.
	ownStream, ownName string
	// wantDelivery is the consumer sequence the next delivery must have;
	// first says none arrived yet in this run.
	wantDelivery uint64
	first        bool

	grouped   *batches
	cur, prev eventBatch
	n         int       // events in cur
	found     []finding // reused for every event

	stalls int // stall checks in a row that found events pending
	// The wait for an event is bounded by stallCheck from the end of the
	// last one's handling, with one deadline context per quiet spell
	// instead of one per event (a timer each: a seventh of the loop's
	// CPU): when it expires while events still arrive, the deadline moves
	// to stallCheck after the last of them.
	lastEvent time.Time
	wait      deadlineCtx
}

// eventBatch is a batch of events being classified: its last event (whose
// AckAll acknowledges it all) and the number of the last publish carrying
// one of its assessments (0: none).
type eventBatch struct {
	last jetstream.Msg
	upTo uint64
}

// newRun returns the run of cons's deliveries through it, with acks for
// the assessment publishes. The caller stops it, closes acks and stops
// the run's wait.
func (c *classifier) newRun(cons jetstream.Consumer, it jetstream.MessagesContext, acks *asyncAcks) *classifyRun {
	info := cons.CachedInfo()
	return &classifyRun{
		c: c, cons: cons, it: it, acks: acks,
		ownStream: info.Stream, ownName: info.Name,
		wantDelivery: c.delivered + 1, first: true,
		grouped: newBatches(c.pub),
	}
}

// run classifies jw.events.> with the durable consumer until ctx
// ends or the consumer fails.
func (c *classifier) run(ctx context.Context) error {
	cons, err := c.start(ctx)
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	defer it.Stop()
	acks, err := c.pub.newAsyncAcks()
	if err != nil {
		return err
	}
	defer acks.close()
	r := c.newRun(cons, it, acks)
	r.wait.reset(ctx, stallCheck)
	defer r.wait.stop()
	return r.loop(ctx)
}

// loop is the run: every event through the stages, in order.
func (r *classifyRun) loop(ctx context.Context) error {
	for {
		m, err := r.next(ctx)
		if err != nil || m == nil {
			return err // nil: ctx ended, what was in flight settled
		}
		md, ok, err := r.admit(ctx, m)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := r.classify(ctx, m, md.stream); err != nil {
			return err
		}
		if err := r.ack(ctx, m, md.pending); err != nil {
			return err
		}
		r.lastEvent = time.Now() // the wait for the next event starts
	}
}

// next waits for the next delivery. Nothing for stallCheck makes it ask
// whether the consumer is idle or stalled (stalled: idle). When ctx ends
// it settles what is in flight and returns nil and no error.
func (r *classifyRun) next(ctx context.Context) (jetstream.Msg, error) {
	for {
		m, err := r.it.Next(r.wait.next...)
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			if quiet := time.Since(r.lastEvent); quiet < stallCheck {
				r.wait.reset(ctx, stallCheck-quiet)
				continue
			}
			r.wait.reset(ctx, stallCheck)
			if err := r.idle(ctx); err != nil {
				return nil, err
			}
			continue
		}
		r.stalls = 0
		if err != nil {
			if ctx.Err() != nil {
				// Settle what is in flight; anything left unacknowledged
				// is redelivered to the next run.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				if r.settle(sctx, &r.prev) == nil {
					_ = r.settle(sctx, &r.cur)
				}
				return nil, nil
			}
			return nil, fmt.Errorf("events consumer: %w", err)
		}
		return m, nil
	}
}

// idle handles stallCheck without an event: idle, or a pull that a
// cluster's leader change left parked where nothing answers it. The
// consumer's own count tells which; twice stalled in a row, what was
// classified is settled and the run ends with an error (the consumer is
// started again, from its ack floor).
func (r *classifyRun) idle(ctx context.Context) error {
	info, err := r.cons.Info(ctx)
	switch {
	case err != nil:
		r.c.log.Warn().Err(err).Msg("events consumer idle and its info unavailable")
	case info.NumPending == 0:
		r.stalls = 0
	default:
		r.stalls++
		r.c.log.Warn().Uint64("pending", info.NumPending).Int("checks", r.stalls).Dur("idle", stallCheck).Msg("events consumer has events pending and delivers none")
		if r.stalls >= 2 {
			// Settle what was classified (its events are not delivered
			// again, so not assessed twice), then start over.
			if err := r.settleAll(ctx); err != nil {
				return err
			}
			return fmt.Errorf("events consumer stalled with %d events pending", info.NumPending)
		}
	}
	return nil
}

// admit routes a delivery: ok when it is this consumer's next one, to be
// classified; not ok, and no error, when another consumer delivered it on
// this consumer's inbox (dropped: neither classified nor acknowledged);
// an error wrapping errDeliveriesLost, after settling what was classified,
// when deliveries were skipped.
func (r *classifyRun) admit(ctx context.Context, m jetstream.Msg) (delivery, bool, error) {
	md, err := deliveryOf(m)
	if err != nil {
		return delivery{}, false, fmt.Errorf("events consumer: %w", err)
	}
	if md.streamName != r.ownStream || md.consumerName != r.ownName {
		// A push consumer's deliver subject is its creator's choice,
		// checked against no permission: not an event of the log.
		r.c.log.Warn().Str("stream", md.streamName).Str("consumer", md.consumerName).Str("subject", m.Subject()).Msg("events consumer: a message another consumer delivered on its inbox dropped")
		return delivery{}, false, nil
	}
	// A reset numbers the deliveries from 1 again; the first of a run may
	// follow the last of the consumer's (a reset, or none needed) or be
	// that 1.
	if got := md.consumer; got != r.wantDelivery && !(r.first && got == 1) {
		// Not classified: it comes again after the restart, with the
		// deliveries that were lost before it.
		r.c.log.Warn().Uint64("delivery", md.consumer).Uint64("want", r.wantDelivery).Uint64("seq", md.stream).Msg("events consumer skipped deliveries (lost in transit); settling and starting again from the ack floor")
		if err := r.settleConfirmed(ctx); err != nil {
			return delivery{}, false, err
		}
		return delivery{}, false, fmt.Errorf("%w: delivery %d, want %d", errDeliveriesLost, md.consumer, r.wantDelivery)
	}
	r.wantDelivery, r.first = md.consumer+1, false
	return md, true, nil
}

// classify observes the event m, at stream sequence seq, in the tracker
// and assesses and publishes every call it closed. An error leaves the
// event unacknowledged: it is delivered again once the consumer restarts.
func (r *classifyRun) classify(ctx context.Context, m jetstream.Msg, seq uint64) error {
	session := stream.SessionOf(m.Subject())
	var err error
	r.found, err = r.c.track.observe(session, seq, m.Data(), r.found[:0])
	if err != nil {
		r.c.log.Warn().Err(err).Str("session", session).Uint64("seq", seq).Msg("event does not decode; skipped")
	}
	for i := range r.found {
		f := &r.found[i]
		a, err := r.assess(ctx, f, seq)
		if err != nil {
			return err
		}
		if a == nil {
			continue
		}
		actx, endSpan := r.c.startAssessmentSpan(ctx, a, f.callSeq)
		err = r.publish(actx, f, a)
		endSpan(err)
		if err != nil {
			return err
		}
	}
	return nil
}

// assess returns the assessment of a finding of the event at seq: the
// tracker's, or, for a call whose assessment needs its history, Inspect's
// over the history loaded through seq (nil when the call cannot be
// assessed: inspectLoaded).
func (r *classifyRun) assess(ctx context.Context, f *finding, seq uint64) (*schema.Assessment, error) {
	if f.ready {
		return &f.a, nil
	}
	return r.c.inspectLoaded(ctx, f.session, f.callID, seq)
}

// publish sends the assessment a of finding f: a call closed by a fence
// at once (with its id as Nats-Msg-Id), after the session's grouped
// assessments, which come before it in the log; any other into its
// session's group.
func (r *classifyRun) publish(ctx context.Context, f *finding, a *schema.Assessment) error {
	var pubN uint64
	var err error
	if f.fenced {
		if pubN, err = r.grouped.flushSession(ctx, r.acks, f.session); err != nil {
			return err
		}
		pubN, err = r.c.pub.publishAsync(ctx, r.acks, *a, true)
	} else {
		pubN, err = r.grouped.add(ctx, r.acks, a)
	}
	if err != nil {
		return err
	}
	r.published(pubN)
	return nil
}

// ack adds the classified event m to the current batch, with pending the
// consumer's count of events after it: nothing pending settles every
// batch (a quiet system publishes at once); a full batch is left in
// flight and the one before it settled.
func (r *classifyRun) ack(ctx context.Context, m jetstream.Msg, pending uint64) error {
	r.cur.last = m
	r.n++
	switch {
	case pending == 0:
		if err := r.settleAll(ctx); err != nil {
			return err
		}
		r.n = 0
	case r.n >= ackBatch:
		if err := r.flushGrouped(ctx); err != nil {
			return err
		}
		if err := r.settle(ctx, &r.prev); err != nil {
			return err
		}
		r.prev, r.cur = r.cur, eventBatch{}
		r.n = 0
	}
	return nil
}

// published records in the current batch the number of a publish that
// carries one of its assessments (0: nothing was published).
func (r *classifyRun) published(pubN uint64) {
	if pubN > 0 {
		r.cur.upTo = pubN
	}
}

// flushGrouped publishes the grouped assessments into the current batch:
// they go out before its events are acknowledged.
func (r *classifyRun) flushGrouped(ctx context.Context) error {
	pubN, err := r.grouped.flush(ctx, r.acks)
	r.published(pubN)
	return err
}

// settle waits for b's publishes (the current batch's grouped assessments
// flushed first), acknowledges its last event and empties it.
func (r *classifyRun) settle(ctx context.Context, b *eventBatch) error {
	if b == &r.cur {
		if err := r.flushGrouped(ctx); err != nil {
			return err
		}
	}
	if err := r.acks.settleThrough(ctx, b.upTo); err != nil {
		return err
	}
	if b.last != nil {
		if err := b.last.Ack(); err != nil {
			return fmt.Errorf("ack events: %w", err)
		}
	}
	*b = eventBatch{}
	return nil
}

// settleAll settles the previous batch, then the current one.
func (r *classifyRun) settleAll(ctx context.Context) error {
	if err := r.settle(ctx, &r.prev); err != nil {
		return err
	}
	return r.settle(ctx, &r.cur)
}

// settleConfirmed is settleAll with the acknowledgement confirmed by the
// server (before a reset to the ack floor, which must be past it).
func (r *classifyRun) settleConfirmed(ctx context.Context) error {
	last := r.cur.last
	if last == nil {
		last = r.prev.last
	}
	r.cur.last, r.prev.last = nil, nil
	if err := r.settleAll(ctx); err != nil {
		return err
	}
	if last == nil {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := last.DoubleAck(actx); err != nil {
		return fmt.Errorf("ack events: %w", err)
	}
	return nil
}

// deadlineCtx is a context with a deadline that is replaced as a whole,
// and the Next option that waits on it (made once per context: an option
// made per event was two allocations per event).
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	next   []jetstream.NextOpt
}

// reset replaces the context by one of parent ending after d.
func (w *deadlineCtx) reset(parent context.Context, d time.Duration) {
	w.stop()
	w.ctx, w.cancel = context.WithTimeout(parent, d)
	w.next = []jetstream.NextOpt{jetstream.NextContext(w.ctx)}
}

// stop releases the context's timer.
func (w *deadlineCtx) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// stallCheck is how long the classifier waits for an event before it asks
// whether its consumer is idle or stalled.
const stallCheck = 2 * time.Second
