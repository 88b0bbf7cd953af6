package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// The lease core: the two rules every lease of this package shares, each
// written once. holdGuard says when a hold can no longer be trusted (the
// expiry of a lease by the local clock, or a loss), for session leases
// (LeaseHold), partition leases (PartitionHold) and the holds derived
// from them (a partition's session, a recovery fence). epochCounter draws
// writer epochs from a counter key by compare-and-set, for session leases
// (epoch.<session>) and partition leases (epoch.partition.<p>).

// holdGuard is the end of a hold. A hold is good until it is lost (lose,
// for good, with the first error, wrapped so that it matches ErrHoldLost
// and ErrFenced) and, for a lease (a guard made with a TTL), until one TTL
// after the start of its latest successful write by the local clock: a
// writer whose renewals stall stops appending before the server can let
// the lease expire and someone else fences it. The zero value is a guard
// without a clock and without a lost callback. Safe for concurrent use.
type holdGuard struct {
	ttl    time.Duration // 0: no clock, good until lost
	what   string        // names the lease in the expiry's error ("lease of s")
	onLost func(error)   // called once when the hold is lost, but not released

	mu   sync.Mutex
	last time.Time // with a clock: when the latest successful write started
	err  error     // permanent: why the hold ended
}

// newLeaseGuard returns the guard of a lease written (created) at t0 that
// lives ttl after each write; what names it in the expiry's error. onLost,
// when not nil, is called once when the hold is lost for any reason but a
// release.
func newLeaseGuard(what string, ttl time.Duration, t0 time.Time, onLost func(error)) *holdGuard {
	return &holdGuard{ttl: ttl, what: what, onLost: onLost, last: t0}
}

// expired reports whether a lease whose latest successful write started
// at last, and which lives ttl after it, can no longer be trusted at now.
// The one expiry rule of the package's leases.
func expired(last time.Time, ttl time.Duration, now time.Time) bool {
	return !now.Before(last.Add(ttl))
}

// Err returns nil while the hold can be trusted; once it cannot, the error
// that ended it, for good. A lease found expired by the local clock is
// lost here (with the lost callback).
func (g *holdGuard) Err() error {
	g.mu.Lock()
	err, stale := g.err, g.ttl > 0 && expired(g.last, g.ttl, time.Now())
	g.mu.Unlock()
	if err == nil && stale {
		g.Lose(fmt.Errorf("%s not renewed within its TTL", g.what))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Lose ends the hold with err (wrapped so that it matches ErrHoldLost and
// ErrFenced) and, the first time, calls the lost callback with it.
func (g *holdGuard) Lose(err error) {
	if first := g.end(err); first && g.onLost != nil {
		g.onLost(g.Err())
	}
}

// end records err as why the hold ended, without the lost callback (a
// release); it reports whether it was the first.
func (g *holdGuard) end(err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return false
	}
	g.err = holdLostError(err)
	return true
}

// renewed records a write of the lease that the server took and that
// started at t0: the lease is trusted one TTL from t0, unless the hold
// ended meanwhile. apply, when not nil, is run with the guard's lock held
// and only then (what the holder records with the write).
func (g *holdGuard) renewed(t0 time.Time, apply func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.last = t0
		if apply != nil {
			apply()
		}
	}
}

// failed records a write of the lease that failed with err: a lease that
// expired or changed hands (ErrLeaseLost) is lost; another failure ends
// the hold only if its TTL ran out meanwhile by the local clock (Err), and
// otherwise leaves it good while its time lasts.
func (g *holdGuard) failed(err error) {
	if errors.Is(err, ErrLeaseLost) {
		g.Lose(err)
		return
	}
	_ = g.Err() // loses a lease whose TTL ran out meanwhile
}

// holdLostError wraps err so that it matches ErrHoldLost and ErrFenced.
func holdLostError(err error) error {
	switch {
	case !errors.Is(err, ErrFenced):
		return fmt.Errorf("%w: %w (%w)", ErrHoldLost, ErrFenced, err)
	case !errors.Is(err, ErrHoldLost):
		return fmt.Errorf("%w: %w", ErrHoldLost, err)
	}
	return err
}

// epochCounter is a counter of writer epochs in jw_leases: a key without
// TTL, so that it outlives the leases whose epochs it drew, holding the
// latest epoch drawn in decimal, moved only up and only by compare-and-set
// on the revision read.
type epochCounter struct {
	kv   jetstream.KeyValue
	key  string
	what string // names the counter's owner in errors ("session s", "partition 3")
	step uint64 // how far above the base a drawn epoch is
}

// draw moves the counter to a new epoch, step above the higher of its
// value and floor (read afresh before every attempt), stores it by
// compare-and-set (create when the key is new, update on the revision
// read) and returns it. A counter another writer moved in between is read
// again. An epoch that would pass schema.MaxEpoch is ErrEpochExhausted
// (only a corrupt log or counter gets there: epochs grow by a step per
// acquisition), never a wrap-around.
func (c epochCounter) draw(ctx context.Context, floor func(context.Context) (uint64, error)) (uint64, error) {
	for {
		low, err := floor(ctx)
		if err != nil {
			return 0, err
		}
		cur, rev, err := c.read(ctx)
		if err != nil {
			return 0, err
		}
		base := max(cur, low)
		if base > schema.MaxEpoch-c.step {
			return 0, fmt.Errorf("%w: %s is at epoch %d (floor) / %d (counter), the highest allowed is %d", ErrEpochExhausted, c.what, low, cur, uint64(schema.MaxEpoch))
		}
		next := base + c.step
		val := []byte(strconv.FormatUint(next, 10))
		if rev == 0 {
			_, err = c.kv.Create(ctx, c.key, val)
		} else {
			_, err = c.kv.Update(ctx, c.key, val, rev)
		}
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
			return 0, fmt.Errorf("stream: store epoch of %s: %w", c.what, err)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

// read returns the counter's value and revision (0 and 0 when the key is
// new).
func (c epochCounter) read(ctx context.Context) (cur, rev uint64, err error) {
	e, err := c.kv.Get(ctx, c.key)
	switch {
	case err == nil:
		cur, _ = strconv.ParseUint(string(e.Value()), 10, 64)
		return cur, e.Revision(), nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, 0, nil
	}
	return 0, 0, fmt.Errorf("stream: read epoch of %s: %w", c.what, err)
}
