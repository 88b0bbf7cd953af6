package recoverer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// CountingLease is the session name whose lease (a key of jw_leases, with
// the bucket's TTL and renewal like every session lease) the recovery
// workers contend for to decide which one of them counts the work they all
// do alike: every recovery worker classifies every event and judges every
// review, so each would count every assessment, review and approval
// timeout, and a sum() over them would count each once per worker. It is
// reserved: no session may be called so.
const CountingLease = "_jw-recoverer-counting"

// counting is the recoverer's hold on CountingLease. Counting is true
// while the lease is held — by the local clock, so a holder whose renewals
// stall (a frozen process) stops before the server lets the lease expire
// and another can take it — and once this recoverer has caught up, since
// it acquired the lease, with the events and reviews that existed then:
// whatever the previous holder counted came from those, which this one
// has then handled already without counting. A hand-over therefore leaves
// a gap (what is assessed between the old holder's stop and the new
// holder's catch-up is counted by nobody), never a double count.
type counting struct {
	*base

	mu       sync.Mutex
	hold     *stream.LeaseHold // nil while not held
	caughtUp bool              // since hold was acquired
}

// Counting reports whether this recoverer counts the work every recovery
// worker does alike (assessments, reviews judged, approvals timed out):
// it holds CountingLease and has caught up since acquiring it.
func (c *counting) Counting() bool {
	c.mu.Lock()
	h, ok := c.hold, c.caughtUp
	c.mu.Unlock()
	return ok && h != nil && h.Err() == nil
}

// run contends for CountingLease until ctx ends: it acquires the lease
// when it is free, renews it a few times per TTL, and releases it at the
// end (so that another recoverer takes it over at once).
func (c *counting) run(ctx context.Context) error {
	ttl := c.t.Config().LeaseTTL
	tick := time.NewTicker(max(ttl/10, 50*time.Millisecond))
	defer tick.Stop()
	defer c.release()
	var renewed time.Time
	for {
		c.step(ctx, &renewed, ttl/4)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// step is one turn of run: acquire when not held, catch up, renew when
// due (every renewEvery).
func (c *counting) step(ctx context.Context, renewed *time.Time, renewEvery time.Duration) {
	c.mu.Lock()
	h, caughtUp := c.hold, c.caughtUp
	c.mu.Unlock()
	if h != nil && h.Err() != nil {
		c.log.Warn().Err(h.Err()).Msg("counting lease lost: this recovery worker stops counting assessments, reviews and approval timeouts")
		c.set(nil, false)
		h = nil
	}
	if h == nil {
		since := time.Now()
		nh, err := c.t.Leases().HoldLease(ctx, CountingLease, c.cfg.Owner, nil)
		if err != nil {
			if !errors.Is(err, stream.ErrLeaseHeld) && ctx.Err() == nil {
				c.log.Debug().Err(err).Msg("counting lease not acquired")
			}
			return
		}
		c.set(nh, false)
		h, *renewed = nh, since
	}
	if time.Since(*renewed) >= renewEvery {
		t0 := time.Now()
		if err := h.Renew(ctx); err != nil {
			c.log.Debug().Err(err).Msg("counting lease not renewed")
		} else {
			*renewed = t0
		}
	}
	if !caughtUp && c.consumersCaughtUp(ctx) {
		c.mu.Lock()
		if c.hold == h {
			c.caughtUp = true
		}
		c.mu.Unlock()
		c.log.Info().Msg("counting: this recovery worker counts assessments, reviews judged and approval timeouts")
	}
}

func (c *counting) set(h *stream.LeaseHold, caughtUp bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold, c.caughtUp = h, caughtUp
}

// release gives the lease up, if held.
func (c *counting) release() {
	c.mu.Lock()
	h := c.hold
	c.hold, c.caughtUp = nil, false
	c.mu.Unlock()
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.Release(ctx)
}

// consumersCaughtUp reports whether this recoverer's events and reviews consumers
// have acknowledged every message their streams held when asked: each
// is read first (its last sequence), then its consumer.
func (c *counting) consumersCaughtUp(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, c.t.Config().RequestTimeout)
	defer cancel()
	for _, s := range []struct {
		st   jetstream.Stream
		kind string
	}{{c.t.Events, "events"}, {c.t.Reviews, "reviews"}} {
		info, err := s.st.Info(ctx)
		if err != nil {
			return false
		}
		last := info.State.LastSeq
		if last == 0 {
			continue
		}
		cons, err := s.st.Consumer(ctx, c.consumerName(s.kind))
		if err != nil {
			return false
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return false
		}
		if ci.AckFloor.Stream < last && (ci.NumPending > 0 || ci.NumAckPending > 0) {
			return false
		}
	}
	return true
}

// Counting reports whether this recoverer counts, for its Observer, the
// work every recovery worker does alike: the assessments it publishes,
// the reviews it judges and the approvals it sees time out. Exactly one
// recovery worker with an Observer counts at a time (the holder of
// CountingLease, once caught up); the others report the same work to
// their Observers and must not count it, so that a sum over all of them
// counts each once. A hand-over leaves a gap, never an overlap. False
// without an Observer (no lease is taken then).
func (r *Recoverer) Counting() bool { return r.count.Counting() }

// Counter is implemented by an Observer that passes events on to others
// (a tee) to say whether anything behind it counts: one that does not
// (no metrics) takes no counting lease.
type Counter interface {
	Counts() bool
}

// counts reports whether o counts what it is told: an Observer does,
// unless it is a Counter that says it does not.
func counts(o Observer) bool {
	if o == nil {
		return false
	}
	if c, ok := o.(Counter); ok {
		return c.Counts()
	}
	return true
}
