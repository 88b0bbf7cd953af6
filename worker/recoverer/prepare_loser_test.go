package recoverer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// TestLoserPublishesForCrashedWinner: a prepare whose KV create lost to a
// plan created moments ago publishes it itself (same Msg-Id), so a winner
// that crashed between its create and its publication leaves no plan
// unpublished; the winner's store stands (same plan id and IssuedAt), and
// JW_PLANS holds one message however often the plan is asked for after.
func TestLoserPublishesForCrashedWinner(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	w := e.writer("s-l", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusFailed, "")

	crashing := e.recoverer("a")
	crashing.issuer.afterCreate = func(schema.Plan) error { return errCrash }
	if _, err := crashing.Prepare(ctx, "s-l", "c-1"); !errors.Is(err, errCrash) {
		t.Fatalf("prepare with the crash hook: %v", err)
	}
	stored, err := stream.NewPlans(e.topo.PlanBucket).Get(ctx, recovery.PlanID("s-l", "c-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The loser does not see the plan at first (as if it had asked just
	// before the create), so it plans and loses the create.
	loser := e.recoverer("b", func(c *Config) { c.Now = func() time.Time { return time.Unix(0, 0) } })
	lag := &laggingKV{KeyValue: e.topo.PlanBucket}
	lag.misses.Store(1)
	loser.issuer.plans = stream.NewPlans(lag)
	p, err := loser.Prepare(ctx, "s-l", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if p.PlanID != stored.Plan.PlanID || !p.IssuedAt.Equal(stored.Plan.IssuedAt) || p.Sig != stored.Plan.Sig {
		t.Fatalf("loser returned %+v, want the stored plan %+v", p, stored.Plan)
	}
	if msgs := e.planMsgs(); len(msgs) != 1 || msgs[p.PlanID] != 1 {
		t.Fatalf("JW_PLANS %v after the loser, want the plan once", msgs)
	}
	for _, r := range []*Recoverer{loser, e.recoverer("c")} {
		if again, err := r.Prepare(ctx, "s-l", "c-1"); err != nil || again.PlanID != p.PlanID {
			t.Fatalf("prepare again: %+v %v", again, err)
		}
	}
	if msgs := e.planMsgs(); len(msgs) != 1 || msgs[p.PlanID] != 1 {
		t.Fatalf("JW_PLANS %v, want the plan once", msgs)
	}
}

// TestJustCreated: only an issued record stored by the server less than
// half the dedup window ago counts as just created; an older one, one
// whose time is unknown, a consumed one, and any on a stream without a
// dedup window do not (they get the full deliverability check).
func TestJustCreated(t *testing.T) {
	e := setup(t, 0)
	r := e.recoverer("a")
	window := e.topo.PlanLog.CachedInfo().Config.Duplicates
	if window <= 0 {
		t.Fatalf("JW_PLANS dedup window %s", window)
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		rec  stream.PlanRecord
		want bool
	}{
		{"just now", stream.PlanRecord{State: stream.PlanIssued, StoredAt: now}, true},
		{"server clock ahead", stream.PlanRecord{State: stream.PlanIssued, StoredAt: now.Add(10 * time.Second)}, true},
		{"inside half the window", stream.PlanRecord{State: stream.PlanIssued, StoredAt: now.Add(-window/2 + 5*time.Second)}, true},
		{"past half the window", stream.PlanRecord{State: stream.PlanIssued, StoredAt: now.Add(-window / 2)}, false},
		{"long ago", stream.PlanRecord{State: stream.PlanIssued, StoredAt: now.Add(-time.Hour)}, false},
		{"time unknown", stream.PlanRecord{State: stream.PlanIssued}, false},
		{"consumed", stream.PlanRecord{State: stream.PlanConsumed, StoredAt: now}, false},
	} {
		if got := r.issuer.justCreated(tc.rec); got != tc.want {
			t.Errorf("%s: justCreated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPrepareAfterRacingFence: a prepare of an open call whose takeover is
// beaten by another owner's fence (ErrFenced) plans from the history it
// loaded extended by what followed — the other owner's fence, which closed
// the call — and so issues a not_started plan whose prior seq is the
// call's; when the log still leaves the call open after that, it refuses
// with not_confirmed.
func TestPrepareAfterRacingFence(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	w := e.writer("s-f", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	callSeq := w.seqs["c-1"]
	if err := w.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := e.recoverer("a")
	fenced := 0
	r.leases.fault = func(session string) error {
		fenced++
		if _, err := e.topo.Logs().Fence(ctx, session, "other-owner", 7); err != nil {
			return err
		}
		return stream.ErrFenced
	}
	p, err := r.Prepare(ctx, "s-f", "c-1")
	if err != nil {
		t.Fatalf("prepare after a racing fence: %v", err)
	}
	if fenced != 1 || p.Basis != schema.BasisNotStarted || p.PriorSeq != callSeq {
		t.Fatalf("plan %+v after %d fences, want not_started from seq %d", p, fenced, callSeq)
	}
	if msgs := e.planMsgs(); msgs[p.PlanID] != 1 {
		t.Fatalf("JW_PLANS %v, want the plan once", msgs)
	}

	// A takeover that fails fenced while nothing on the log closed the
	// call (the fence error is made up here) leaves it not_confirmed.
	w2 := e.writer("s-g", "w1")
	w2.call("c-1", "orders.create", effect.Idempotent, "k-1")
	if err := w2.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.leases.fault = func(string) error { return stream.ErrFenced }
	if _, err := r.Prepare(ctx, "s-g", "c-1"); !errors.Is(err, schema.ErrNotConfirmed) {
		t.Fatalf("prepare with the call still open after a fence error: %v, want not_confirmed", err)
	}
}
