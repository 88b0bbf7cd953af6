package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestTakeOverGuardsByTheLocalClock: a writer that took a session over and
// stops renewing its lease has its appends refused once the TTL has passed
// by its own clock, before anyone fenced it, and nothing more is written;
// the next owner's TakeOver gets a higher epoch and the confirmed history
// through its fence, and the old hold's lost callback ran once.
func TestTakeOverGuardsByTheLocalClock(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second, LeaseMarkerTTL: time.Second}})
	var lost atomic.Int32
	hold, err := topo.Leases().HoldLease(ctx, "s-1", "w1", func(err error) {
		if !errors.Is(err, stream.ErrHoldLost) || !errors.Is(err, stream.ErrFenced) {
			t.Errorf("lost with %v, want ErrHoldLost and ErrFenced", err)
		}
		lost.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := topo.Leases().Confirm(ctx, hold)
	if err != nil {
		t.Fatal(err)
	}
	if tk.FenceSeq == 0 || len(tk.History) != 1 || tk.History[0].Type != schema.TypeFenced || tk.Log.Epoch() != hold.Epoch() {
		t.Fatalf("takeover %+v", tk)
	}
	if _, err := tk.Log.Append(ctx, started("c-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Leases().TakeOver(ctx, "s-1", "w2", topo.Leases().SessionLeases()); !errors.Is(err, stream.ErrLeaseHeld) {
		t.Fatalf("take over a held session: %v, want ErrLeaseHeld", err)
	}
	// No renewal: the guard refuses once the TTL passed by the local clock.
	streamtest.Eventually(t, 3*time.Second, "the guard to refuse", func() bool { return hold.Err() != nil })
	if _, err := tk.Log.Append(ctx, started("c-late")); !errors.Is(err, stream.ErrHoldLost) || !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("append after the TTL: %v, want ErrHoldLost", err)
	}
	if err := hold.Renew(ctx); err == nil {
		t.Fatal("a lost hold renewed")
	}
	var next *stream.Takeover
	streamtest.Eventually(t, 10*time.Second, "the server to expire the lease", func() bool {
		next, err = topo.Leases().TakeOver(ctx, "s-1", "w2", topo.Leases().SessionLeases())
		return err == nil
	})
	defer func() { _ = next.Hold.Release(ctx) }()
	h := next.History
	if next.Hold.Epoch() <= hold.Epoch() || len(h) != 3 || h[1].Started == nil || h[1].Started.CallID != "c-1" || h[2].Type != schema.TypeFenced || next.FenceSeq != h[2].Seq {
		t.Fatalf("second takeover at epoch %d: %d events %+v", next.Hold.Epoch(), len(h), h)
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("lost callback ran %d times, want 1", n)
	}
}

// TestGuardedLogLosesTheHoldWhenFenced: an owner that keeps renewing but is
// fenced anyway (another writer fenced at a higher epoch by hand) has its
// next append refused with ErrFenced, and its hold ends for good.
func TestGuardedLogLosesTheHoldWhenFenced(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tk, err := topo.Leases().TakeOver(ctx, "s-1", "w1", topo.Leases().SessionLeases())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Logs().Fence(ctx, "s-1", "intruder", tk.Hold.Epoch()+5); err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Log.Append(ctx, started("c-1")); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("append after a newer fence: %v", err)
	}
	if err := tk.Hold.Err(); !errors.Is(err, stream.ErrHoldLost) {
		t.Fatalf("hold after the fence: %v", err)
	}
	if h, _ := topo.Logs().Load(ctx, "s-1"); len(h) != 2 {
		t.Fatalf("log holds %d events, want the two fences", len(h))
	}
}

// TestTakeOverReleasesOnFailure: a log with no room even for a fence is
// ErrLogClosed and the hold TakeOver acquired is released, so the session
// is not left held; a custom Acquirer (a partition's lease, later) is
// asked for the hold and gets the same treatment.
func TestTakeOverReleasesOnFailure(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Limits: schema.Limits{MaxEvents: 1000}}})
	ev := started("c")
	ev.V, ev.Session, ev.Epoch, ev.At = 1, "s-full", 1, time.Now().UTC()
	payload, _ := json.Marshal(ev)
	publishN(t, topo, "s-full", payload, 1000)
	asked := 0
	acq := stream.AcquirerFunc(func(ctx context.Context, session, owner string) (stream.Hold, error) {
		asked++
		return topo.Leases().HoldLease(ctx, session, owner, nil)
	})
	if _, err := topo.Leases().TakeOver(ctx, "s-full", "w1", acq); !errors.Is(err, stream.ErrLogClosed) || asked != 1 {
		t.Fatalf("take over a full log: %v (asked %d), want ErrLogClosed", err, asked)
	}
	if lv, live, err := topo.Leases().LeaseHolder(ctx, "s-full"); err != nil || live {
		t.Fatalf("lease after a failed takeover: %+v live %v %v, want released", lv, live, err)
	}
	if h, err := topo.Logs().Load(ctx, "s-full"); err != nil || len(h) != 1000 {
		t.Fatalf("the full log: %d events %v, want it unchanged", len(h), err)
	}
}

// TestTakeOverWithLoaded: a takeover after a LoadHistory reads only what
// the log got since, and its confirmed history is exactly what a full
// load gives; the limits count the loaded part too.
func TestTakeOverWithLoaded(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Limits: schema.Limits{MaxEvents: 1000}}})
	w, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c-1", "c-2"} {
		if _, err := w.Append(ctx, started(id)); err != nil {
			t.Fatal(err)
		}
	}
	loaded, err := topo.Logs().LoadHistory(ctx, "s-1")
	if err != nil || len(loaded.Events) != 3 {
		t.Fatalf("LoadHistory: %d events %v", len(loaded.Events), err)
	}
	// The old writer gets one more in between.
	if _, err := w.Append(ctx, started("c-3")); err != nil {
		t.Fatal(err)
	}
	tk, err := topo.Leases().TakeOver(ctx, "s-1", "w2", topo.Leases().SessionLeases(), stream.WithLoaded(loaded))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tk.Hold.Release(ctx) }()
	full, err := topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(tk.History) != len(full) || len(full) != 5 {
		t.Fatalf("confirmed history %d events, full load %d, want 5", len(tk.History), len(full))
	}
	for i := range full {
		if tk.History[i].Seq != full[i].Seq || tk.History[i].Type != full[i].Type {
			t.Fatalf("event %d: %+v, full load %+v", i, tk.History[i], full[i])
		}
	}
	if len(loaded.Events) != 3 {
		t.Fatal("the takeover changed the caller's loaded history")
	}
	// Over the limit counting the loaded part: refused, as a full load is.
	ev := started("c")
	ev.V, ev.Session, ev.Epoch, ev.At = 1, "s-2", 1, time.Now().UTC()
	payload, _ := json.Marshal(ev)
	publishN(t, topo, "s-2", payload, 990)
	loaded2, err := topo.Logs().LoadHistory(ctx, "s-2")
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, topo, "s-2", payload, 9) // 999: room for one fence
	if _, err := topo.Leases().TakeOver(ctx, "s-2", "w2", topo.Leases().SessionLeases(), stream.WithLoaded(loaded2)); err != nil {
		t.Fatalf("takeover into the last slot: %v", err)
	}
	if h, err := topo.Logs().Load(ctx, "s-2"); err != nil || len(h) != 1000 {
		t.Fatalf("full load after: %d %v", len(h), err)
	}
}
