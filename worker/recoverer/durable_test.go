package recoverer

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// renew keeps a writer's lease live until the test ends.
func (w *writer) renew(t *testing.T, every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = w.lease.Renew(ctx)
			}
		}
	}()
}

func started(t *testing.T, r *Recoverer) {
	t.Helper()
	select {
	case <-r.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("recoverer not ready")
	}
}

// statusView is what a restart must not change: the open calls and the
// calls awaiting review (Stats counts the events this process classified,
// which a restart legitimately resets).
func statusView(t *testing.T, r *Recoverer) service.Status {
	t.Helper()
	st, err := r.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return service.Status{OpenCalls: st.OpenCalls, AwaitingReview: st.AwaitingReview, Plans: st.Plans}
}

// TestStatusSurvivesRestart: status before and after a restart (clean
// stop, same name, so the same durable consumers) is the same: a call
// still open under a live lease, calls awaiting review (one from a
// takeover, one from a failed result), and none of those a completed
// review settled or a plan was issued for. A recoverer under a new name
// (new consumers, which read everything again) says the same.
func TestStatusSurvivesRestart(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	e := setup(t, ttl)
	as := e.assessments()
	first := e.recoverer("a")
	stop := e.run(first)
	started(t, first)

	live := e.writer("s-live", "w-live")
	live.renew(t, ttl/4)
	live.call("open-1", "payments.charge", effect.NonIdempotent, "k-1")
	live.started("open-1")

	dead := e.writer("s-dead", "w-dead") // never renews: taken over
	dead.call("pay-1", "payments.charge", effect.NonIdempotent, "k-1")
	dead.started("pay-1")

	fail := e.writer("s-fail", "w-fail")
	fail.renew(t, ttl/4)
	fail.call("pay-2", "payments.charge", effect.NonIdempotent, "k-2")
	fail.started("pay-2")
	fail.result("pay-2", schema.StatusFailed, "")
	fail.call("pay-3", "payments.charge", effect.NonIdempotent, "k-3")
	fail.started("pay-3")
	fail.result("pay-3", schema.StatusFailed, "")
	fail.call("pay-4", "payments.charge", effect.NonIdempotent, "k-4")
	fail.started("pay-4")
	fail.result("pay-4", schema.StatusFailed, "")
	fail.call("ord-1", "orders.create", effect.Idempotent, "k-5")
	fail.started("ord-1")
	fail.result("ord-1", schema.StatusFailed, "") // retry_allowed: never awaits review

	as.wait(t, "s-dead", "pay-1", ttl+5*time.Second)
	as.wait(t, "s-fail", "pay-4", 5*time.Second)
	// pay-3 settled by a completed review, pay-4 reviewed not_executed and
	// planned: neither awaits review any more.
	e.publishReview("s-fail", review(t, e.reviewer, "s-fail", "pay-3", schema.VerdictCompleted))
	e.publishReview("s-fail", review(t, e.reviewer, "s-fail", "pay-4", schema.VerdictNotExecuted))
	streamtest.Eventually(t, 5*time.Second, "pay-4 planned", func() bool {
		_, err := first.Prepare(ctx, "s-fail", "pay-4")
		return err == nil
	})
	wantAwaiting := []string{"s-dead/pay-1", "s-fail/pay-2"}
	var before service.Status
	defer func() {
		if t.Failed() {
			t.Logf("last status: awaiting %v, open %+v", keysOf(before.AwaitingReview), before.OpenCalls)
		}
	}()
	streamtest.Eventually(t, 5*time.Second, "status settles", func() bool {
		before = statusView(t, first)
		got := keysOf(before.AwaitingReview)
		sort.Strings(got)
		return reflect.DeepEqual(got, wantAwaiting) && len(before.OpenCalls) == 1
	})
	if c := before.OpenCalls[0]; c.Session != "s-live" || c.CallID != "open-1" || !c.Started {
		t.Fatalf("open calls %+v", before.OpenCalls)
	}
	stop()

	for _, name := range []string{"a", "fresh"} {
		next := e.recoverer(name)
		stopNext := e.run(next)
		started(t, next)
		var after service.Status
		deadline := time.Now().Add(5 * time.Second)
		for after = statusView(t, next); !reflect.DeepEqual(after, before) && time.Now().Before(deadline); after = statusView(t, next) {
			time.Sleep(streamtest.PollInterval)
		}
		if !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: status after restart\n%+v\nbefore\n%+v", name, after, before)
		}
		if name == "a" && !reflect.DeepEqual(statusView(t, next), before) {
			t.Fatal("status changed after the restart had settled")
		}
		stopNext()
	}
}

func keysOf(as []schema.Assessment) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.Session+"/"+a.CallID)
	}
	return out
}

// TestCallOpenedBeforeRestartFencedAfter is the chaos run's "assessments never
// published": a call opened (and acknowledged by the classifier) before a
// recovery-worker restart, then fenced by a new owner after it, is
// assessed exactly once by the restarted recoverer, and it is listed as
// open until then.
func TestCallOpenedBeforeRestartFencedAfter(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	as := e.assessments()
	first := e.recoverer("a")
	stop := e.run(first)
	started(t, first)

	w := e.writer("s-f", "w1")
	w.call("c-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("c-1")
	waitAcked(t, e, "a", 2)
	stop()

	next := e.recoverer("a")
	e.run(next)
	started(t, next)
	if open := statusView(t, next).OpenCalls; len(open) != 1 || open[0].CallID != "c-1" {
		t.Fatalf("open calls after restart: %+v, want c-1", open)
	}
	// A new owner (a tool worker) takes the session over: its lease, its
	// fence. The recoverer takes no part in it.
	if err := w.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := e.topo.Leases().AcquireLease(ctx, "s-f", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.topo.Logs().Fence(ctx, "s-f", "w2", lease.Epoch); err != nil {
		t.Fatal(err)
	}
	a := as.wait(t, "s-f", "c-1", 10*time.Second)
	if a.Decision != schema.DecisionNeedsReview || a.Evidence != recovery.EvidenceNoResult {
		t.Fatalf("assessment %+v", a)
	}
	streamtest.Eventually(t, 5*time.Second, "awaiting review", func() bool {
		return reflect.DeepEqual(keysOf(statusView(t, next).AwaitingReview), []string{"s-f/c-1"})
	})
	waitAcked(t, e, "a", 3)
	if n := as.count("s-f", "c-1"); n != 1 {
		t.Fatalf("c-1 assessed %d times, want once", n)
	}
}

// TestRecovererKilledDuringTakeover: a recoverer dies at each step of a
// takeover — lease acquired, fence written, assessment published (lease
// not released) — after its classifier had acknowledged the call's
// events. The restarted recoverer (same name) leaves the call assessed
// exactly once on JW_ASSESSMENTS.
func TestRecovererKilledDuringTakeover(t *testing.T) {
	for _, step := range []string{"leased", "fenced", "published"} {
		t.Run(step, func(t *testing.T) { killedDuringTakeover(t, step) })
	}
}

func killedDuringTakeover(t *testing.T, step string) {
	ctx := context.Background()
	e := setup(t, time.Second)
	as := e.assessments()
	first := e.recoverer("a")
	stop := e.run(first)
	started(t, first)
	w := e.writer("s-k", "w1")
	w.renew(t, 250*time.Millisecond)
	w.call("c-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("c-1")
	waitAcked(t, e, "a", 2)
	stop() // killed: nothing published after this

	// What the dead recoverer did before it died.
	if err := w.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := e.topo.Leases().AcquireLease(ctx, "s-k", "recoverer-a")
	if err != nil {
		t.Fatal(err)
	}
	if step != "leased" {
		if _, err := e.topo.Logs().Fence(ctx, "s-k", "recoverer-a", lease.Epoch); err != nil {
			t.Fatal(err)
		}
	}
	if step == "published" {
		h, err := e.topo.Logs().Load(ctx, "s-k")
		if err != nil {
			t.Fatal(err)
		}
		a, err := inspect(h, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := first.pub.publishAssessment(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	next := e.recoverer("a")
	e.run(next)
	started(t, next)
	a := as.wait(t, "s-k", "c-1", 10*time.Second)
	if a.Decision != schema.DecisionNeedsReview || a.Evidence != recovery.EvidenceNoResult {
		t.Fatalf("assessment %+v", a)
	}
	// The dead recoverer's lease expires: the takeover of an expired lease
	// (leased) or its repair (fenced, published) may publish again, with
	// the same Msg-Id, which the stream drops.
	streamtest.Eventually(t, 5*time.Second, "lease expired", func() bool {
		_, live, err := e.topo.Leases().LeaseHolder(ctx, "s-k")
		return err == nil && !live
	})
	streamtest.Eventually(t, 10*time.Second, "events acknowledged, lease free", func() bool {
		c, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("EVENTS"), "jw-recoverer-a-events")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		_, live, lerr := e.topo.Leases().LeaseHolder(ctx, "s-k")
		return err == nil && lerr == nil && !live && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := countOnStream(t, e, "s-k", "c-1"); n != 1 {
		t.Fatalf("c-1 has %d assessments on JW_ASSESSMENTS, want exactly 1", n)
	}
	if got := keysOf(statusView(t, next).AwaitingReview); !reflect.DeepEqual(got, []string{"s-k/c-1"}) {
		t.Fatalf("awaiting review %v", got)
	}
}

// waitAcked waits until recoverer name's events consumer has acknowledged
// at least n events and has nothing pending.
func waitAcked(t *testing.T, e *env, name string, n uint64) {
	t.Helper()
	ctx := context.Background()
	streamtest.Eventually(t, 10*time.Second, "events acknowledged", func() bool {
		c, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("EVENTS"), "jw-recoverer-"+name+"-events")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream >= n && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// countOnStream counts the assessments of a call stored in JW_ASSESSMENTS.
func countOnStream(t *testing.T, e *env, session, callID string) int {
	t.Helper()
	n := 0
	err := e.topo.Reader().ReadSubject(context.Background(), e.topo.Names().StreamName("ASSESSMENTS"), e.topo.Names().AssessmentsSubject(session), func(m *jetstream.RawStreamMsg) error {
		as, err := schema.DecodeAssessments(m.Data)
		if err != nil {
			t.Errorf("assessment message %d: %v", m.Sequence, err)
		}
		for _, a := range as {
			if a.CallID == callID {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
