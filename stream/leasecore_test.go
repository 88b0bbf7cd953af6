package stream

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

func TestExpired(t *testing.T) {
	last := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		now  time.Time
		want bool
	}{
		{"at the write", time.Second, last, false},
		{"within the TTL", time.Second, last.Add(999 * time.Millisecond), false},
		{"at the TTL's end", time.Second, last.Add(time.Second), true},
		{"after the TTL", time.Second, last.Add(time.Hour), true},
		{"a clock that went back", time.Second, last.Add(-time.Hour), false},
	} {
		if got := expired(last, tc.ttl, tc.now); got != tc.want {
			t.Errorf("%s: expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// lostErr checks that err is the error of a hold that ended: it matches
// ErrHoldLost and ErrFenced.
func lostErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrHoldLost) || !errors.Is(err, ErrFenced) {
		t.Fatalf("%s: %v, want an error matching ErrHoldLost and ErrFenced", what, err)
	}
}

func TestHoldGuardExpiresByTheLocalClock(t *testing.T) {
	var calls atomic.Int32
	var got error
	g := newLeaseGuard("lease of s-1", time.Hour, time.Now().Add(-time.Hour), func(err error) {
		calls.Add(1)
		got = err
	})
	err := g.Err()
	lostErr(t, "expired lease", err)
	if calls.Load() != 1 || got != err {
		t.Fatalf("lost callback called %d times with %v, want once with %v", calls.Load(), got, err)
	}
	// For good: a renewal that the server took after the expiry does not
	// bring the hold back, and the callback is not called again.
	applied := false
	g.renewed(time.Now(), func() { applied = true })
	g.failed(errors.New("timeout"))
	g.Lose(errors.New("later"))
	if err2 := g.Err(); err2 != err || applied || calls.Load() != 1 {
		t.Fatalf("after the end: Err %v (was %v), applied %v, callbacks %d", err2, err, applied, calls.Load())
	}
}

func TestHoldGuardRenewedKeepsTheLease(t *testing.T) {
	ttl := time.Hour
	g := newLeaseGuard("lease of s-1", ttl, time.Now().Add(-ttl+time.Minute), nil)
	if err := g.Err(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}
	// A renewal is trusted from when it started, not from its answer.
	applied := false
	g.renewed(time.Now().Add(-ttl), func() { applied = true })
	if !applied {
		t.Fatal("renewal of a good hold not applied")
	}
	lostErr(t, "renewal that started one TTL ago", g.Err())

	g = newLeaseGuard("lease of s-1", ttl, time.Now().Add(-2*ttl), nil)
	g.renewed(time.Now(), nil) // the write went through before anyone asked
	if err := g.Err(); err != nil {
		t.Fatalf("renewed lease: %v", err)
	}
}

func TestHoldGuardFailedWrites(t *testing.T) {
	var calls atomic.Int32
	onLost := func(error) { calls.Add(1) }
	// A failure that is not a loss leaves a lease whose time lasts.
	g := newLeaseGuard("lease of s-1", time.Hour, time.Now(), onLost)
	g.failed(errors.New("stream: renew lease on s-1: timeout"))
	if err := g.Err(); err != nil || calls.Load() != 0 {
		t.Fatalf("after a timeout: %v, %d callbacks", err, calls.Load())
	}
	// A lease that changed hands ends the hold at once.
	lost := errors.Join(ErrLeaseLost, errors.New("session s-1 (epoch 3)"))
	g.failed(lost)
	err := g.Err()
	lostErr(t, "lost lease", err)
	if !errors.Is(err, ErrLeaseLost) || calls.Load() != 1 {
		t.Fatalf("lost lease: %v (want it to wrap ErrLeaseLost), %d callbacks", err, calls.Load())
	}
	// A failure once the TTL ran out ends it too.
	g = newLeaseGuard("lease of s-1", time.Hour, time.Now().Add(-time.Hour), onLost)
	g.failed(errors.New("timeout"))
	g.mu.Lock()
	ended := g.err
	g.mu.Unlock()
	lostErr(t, "failure after the TTL", ended)
	if calls.Load() != 2 {
		t.Fatalf("%d callbacks, want 2", calls.Load())
	}
}

func TestHoldGuardReleaseAndNoClock(t *testing.T) {
	var calls atomic.Int32
	g := newLeaseGuard("lease of s-1", time.Hour, time.Now(), func(error) { calls.Add(1) })
	if !g.end(errReleased) || g.end(errReleased) {
		t.Fatal("end reports first wrongly")
	}
	lostErr(t, "released", g.Err())
	if !errors.Is(g.Err(), errReleased) || calls.Load() != 0 {
		t.Fatalf("released: %v, %d callbacks (a release calls none)", g.Err(), calls.Load())
	}
	// The zero guard has no clock: good until lost, whatever the time.
	var z holdGuard
	if err := z.Err(); err != nil {
		t.Fatalf("zero guard: %v", err)
	}
	z.Lose(ErrFenced)
	err := z.Err()
	lostErr(t, "zero guard lost", err)
	if holdLostError(err) != err {
		t.Fatal("holdLostError wraps an error that matches both again")
	}
}

func TestEpochCounterDraw(t *testing.T) {
	ctx := context.Background()
	topo := setup(t, TopologyConfig{})
	c := epochCounter{kv: topo.LeaseBucket, key: "epoch.core-1", what: "session core-1", step: 2}
	floor := func(v uint64) func(context.Context) (uint64, error) {
		return func(context.Context) (uint64, error) { return v, nil }
	}
	for i, tc := range []struct {
		floor, want uint64
	}{
		{0, 2},  // a new key is created
		{0, 4},  // and updated on its revision
		{9, 11}, // a floor above the counter
		{3, 13}, // a floor below it
	} {
		got, err := c.draw(ctx, floor(tc.floor))
		if err != nil || got != tc.want {
			t.Fatalf("draw %d (floor %d) = %d, %v; want %d", i, tc.floor, got, err, tc.want)
		}
		if e, err := topo.LeaseBucket.Get(ctx, c.key); err != nil || string(e.Value()) != strconv.FormatUint(tc.want, 10) {
			t.Fatalf("draw %d: counter holds %v, %v", i, e, err)
		}
	}
	// The floor's error is returned, the counter left alone.
	boom := errors.New("log unreadable")
	if _, err := c.draw(ctx, func(context.Context) (uint64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("floor failure: %v", err)
	}
	// Never past MaxEpoch.
	if _, err := c.draw(ctx, floor(schema.MaxEpoch-1)); !errors.Is(err, ErrEpochExhausted) {
		t.Fatalf("draw past MaxEpoch: %v", err)
	}
	one := epochCounter{kv: topo.LeaseBucket, key: "epoch.core-2", what: "session core-2", step: 1}
	if got, err := one.draw(ctx, floor(schema.MaxEpoch-1)); err != nil || got != schema.MaxEpoch {
		t.Fatalf("draw up to MaxEpoch = %d, %v", got, err)
	}
	if _, err := one.draw(ctx, floor(0)); !errors.Is(err, ErrEpochExhausted) {
		t.Fatalf("draw from MaxEpoch: %v", err)
	}
}

// Drawers racing on one counter each get their own epoch: a drawer whose
// compare-and-set lost reads the counter again.
func TestEpochCounterConcurrentDrawsAreDistinct(t *testing.T) {
	ctx := context.Background()
	topo := setup(t, TopologyConfig{})
	c := epochCounter{kv: topo.LeaseBucket, key: "epoch.core-race", what: "session core-race", step: 1}
	zero := func(context.Context) (uint64, error) { return 0, nil }
	const n = 8
	var wg sync.WaitGroup
	got := make([]uint64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.draw(ctx, zero)
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("draw %d: %v", i, errs[i])
		}
		if seen[got[i]] || got[i] < 1 || got[i] > n {
			t.Fatalf("epochs drawn: %v", got)
		}
		seen[got[i]] = true
	}
}
