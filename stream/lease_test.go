package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestLeaseAcquireRenewRelease(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	a, err := topo.Leases().AcquireLease(ctx, "s-1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Leases().AcquireLease(ctx, "s-1", "w2"); !errors.Is(err, stream.ErrLeaseHeld) {
		t.Fatalf("second acquire: %v", err)
	}
	if lv, ok, err := topo.Leases().LeaseHolder(ctx, "s-1"); err != nil || !ok || lv.Owner != "w1" || lv.Epoch != a.Epoch {
		t.Fatalf("LeaseHolder = %+v %v %v", lv, ok, err)
	}
	rev := a.Revision()
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Revision() <= rev {
		t.Fatalf("revision %d after renew, was %d", a.Revision(), rev)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := topo.Leases().LeaseHolder(ctx, "s-1"); ok {
		t.Fatal("lease still held after release")
	}
	if err := a.Renew(ctx); !errors.Is(err, stream.ErrLeaseLost) {
		t.Fatalf("renew after release: %v", err)
	}
	b, err := topo.Leases().AcquireLease(ctx, "s-1", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if b.Epoch <= a.Epoch {
		t.Fatalf("epoch %d after %d", b.Epoch, a.Epoch)
	}
	if err := a.Release(ctx); !errors.Is(err, stream.ErrLeaseLost) {
		t.Fatalf("stale release: %v", err)
	}
	// The epoch also clears whatever is on the log.
	if _, err := topo.Logs().Fence(ctx, "s-2", "w9", 41); err != nil {
		t.Fatal(err)
	}
	c, err := topo.Leases().AcquireLease(ctx, "s-2", "w1")
	if err != nil || c.Epoch != 42 {
		t.Fatalf("acquire on a log at epoch 41: epoch %v, %v", c, err)
	}
}

// TestLeaseExpiryReachesWatcher: a lease that is not renewed is removed by
// the server and the watcher hears of it within TTL + 1 s of the last
// renewal; a released lease is not reported; the next lease has a higher
// epoch even though the expired one left no value behind.
func TestLeaseExpiryReachesWatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = time.Second
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: ttl, LeaseMarkerTTL: time.Second}})
	expired, err := topo.Leases().WatchLeaseExpiry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := topo.Leases().AcquireLease(ctx, "released", "w1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := topo.Leases().AcquireLease(ctx, "s-1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	if err := rel.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	select {
	case s := <-expired:
		if s != "s-1" {
			t.Fatalf("watcher reported %q, want s-1", s)
		}
		if d := time.Since(renewed); d > ttl+time.Second {
			t.Fatalf("expiry reported %s after the last renewal (TTL %s)", d, ttl)
		}
	case <-time.After(ttl + time.Second):
		t.Fatal("no expiry within TTL + 1s")
	}
	if err := l.Renew(ctx); !errors.Is(err, stream.ErrLeaseLost) {
		t.Fatalf("renew after expiry: %v", err)
	}
	next, err := topo.Leases().AcquireLease(ctx, "s-1", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch <= l.Epoch {
		t.Fatalf("epoch %d after expired epoch %d", next.Epoch, l.Epoch)
	}
	cancel()
	for range expired { // closed when ctx ends
	}
}

// TestEpochBound: epochs stop at schema.MaxEpoch (2^53-1) instead of
// wrapping around. A writer may fence at the bound but not above it; a log
// at the bound, or one an attacker stamped with 2^64-1, refuses a new
// lease with ErrEpochExhausted rather than handing out epoch 0, which
// would leave the session impossible to take over.
func TestEpochBound(t *testing.T) {
	ctx := context.Background()
	_, nc, topo := streamtest.Start(t)
	if _, err := topo.Logs().Fence(ctx, "s-1", "w1", schema.MaxEpoch+1); !errors.Is(err, stream.ErrInvalidEpoch) {
		t.Fatalf("Fence above the bound: %v", err)
	}
	if _, err := topo.Logs().OpenLog(ctx, "s-1", "w1", 0); !errors.Is(err, stream.ErrInvalidEpoch) {
		t.Fatalf("OpenLog at epoch 0: %v", err)
	}
	if _, err := topo.Logs().Fence(ctx, "s-1", "w1", schema.MaxEpoch); err != nil {
		t.Fatalf("Fence at the bound: %v", err)
	}
	if _, err := topo.Leases().AcquireLease(ctx, "s-1", "w2"); !errors.Is(err, stream.ErrEpochExhausted) {
		t.Fatalf("AcquireLease at the bound: %v", err)
	}
	raw := `{"v":1,"session":"s-2","epoch":18446744073709551615,"at":"2026-11-29T10:00:00Z","type":"session.fenced","fence":{"epoch":18446744073709551615,"owner":"x"}}`
	if err := nc.Publish(topo.Names().EventsSubject("s-2"), []byte(raw)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 5*time.Second, "AcquireLease after a 2^64-1 fence to fail with ErrEpochExhausted", func() bool {
		_, err := topo.Leases().AcquireLease(ctx, "s-2", "w2")
		return errors.Is(err, stream.ErrEpochExhausted)
	})
}
