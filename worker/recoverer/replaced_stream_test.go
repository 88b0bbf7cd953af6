package recoverer

import (
	"context"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestReplacedReviewsStreamRefused: with the admin credential, JW_REVIEWS
// deleted and created again (losing the completed review that settled a
// charged payment) and an old not_executed review published anew: prepare
// issued a plan — a second charge — and nothing noticed beyond a
// consumer-deleted warning. The recovery worker must refuse to prepare on
// a protected stream that lost its history (stream_replaced), while
// running and after a restart.
func TestReplacedReviewsStreamRefused(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	e := setup(t, ttl)
	r := e.recoverer("a")
	stop := e.run(r)
	started(t, r)

	w := e.writer("s-rep", "w-1")
	w.renew(t, ttl/4)
	w.call("pay-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("pay-1")
	w.result("pay-1", schema.StatusFailed, "")
	old := review(t, e.reviewer, "s-rep", "pay-1", schema.VerdictNotExecuted)
	e.publishReview("s-rep", review(t, e.reviewer, "s-rep", "pay-1", schema.VerdictCompleted))
	streamtest.Eventually(t, 10*time.Second, "the completed review decides", func() bool {
		_, err := r.Prepare(ctx, "s-rep", "pay-1")
		return schema.CodeOf(err) == schema.CodeCompleted
	})

	// The admin deletes JW_REVIEWS and creates it again as setup would,
	// then publishes the old not_executed review.
	if err := e.topo.JS.DeleteStream(ctx, e.topo.Names().StreamName("REVIEWS")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, e.topo.JS, e.topo.Config()); err != nil {
		t.Fatal(err)
	}
	e.publishReview("s-rep", old)

	_, err := r.Prepare(ctx, "s-rep", "pay-1")
	if schema.CodeOf(err) != schema.CodeStreamReplaced {
		t.Errorf("HOLE: prepare on a replaced JW_REVIEWS = %v, want stream_replaced", err)
	}
	if n := len(e.planMsgs()); n != 0 {
		t.Fatalf("HOLE: %d plans issued for pay-1 after its completed review was deleted with the stream", n)
	}
	stop()

	next := e.recoverer("a")
	e.run(next)
	started(t, next)
	if _, err := next.Prepare(ctx, "s-rep", "pay-1"); schema.CodeOf(err) != schema.CodeStreamReplaced {
		t.Errorf("HOLE: after a restart, prepare on a replaced JW_REVIEWS = %v, want stream_replaced", err)
	}
	if ps := next.ReplacedStreams(); len(ps) != 1 || ps[0].Stream != e.topo.Names().StreamName("REVIEWS") {
		t.Errorf("ReplacedStreams = %v, want JW_REVIEWS", ps)
	}
	if len(e.planMsgs()) != 0 {
		t.Fatal("HOLE: a plan was issued on the replaced stream")
	}

	// An operator confirms the new JW_REVIEWS (having checked it): prepare
	// acts again, on what the stream now holds.
	if _, err := stream.ConfirmIdentity(ctx, e.topo.JS, e.topo.Prefix, 1, e.topo.Names().StreamName("REVIEWS")); err != nil {
		t.Fatal(err)
	}
	if _, err := next.Prepare(ctx, "s-rep", "pay-1"); err != nil {
		t.Fatalf("prepare after the confirmation: %v", err)
	}
	streamtest.Eventually(t, 15*time.Second, "the periodic check clears the replaced stream", func() bool {
		return len(next.ReplacedStreams()) == 0
	})
}

// TestReplacedStreamDetectedWhileRunning: a protected stream the recovery
// worker does not consume (JW_PLANS) deleted and created again while it
// runs is found by its periodic comparison, and then takeovers are
// refused too: an expired session's open call stays open, not fenced into
// a log nobody can trust.
func TestReplacedStreamDetectedWhileRunning(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	e := setup(t, ttl)
	r := e.recoverer("a", func(c *Config) { c.IdentityInterval = 100 * time.Millisecond })
	e.run(r)
	started(t, r)
	if err := e.topo.JS.DeleteStream(ctx, e.topo.Names().StreamName("PLANS")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, e.topo.JS, e.topo.Config()); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 10*time.Second, "JW_PLANS found replaced", func() bool {
		ps := r.ReplacedStreams()
		return len(ps) == 1 && ps[0].Stream == e.topo.Names().StreamName("PLANS")
	})
	if _, err := r.TakeOver(ctx, "s-none"); schema.CodeOf(err) != schema.CodeStreamReplaced {
		t.Errorf("TakeOver on a replaced JW_PLANS = %v, want stream_replaced", err)
	}
	if _, err := r.Prepare(ctx, "s-none", "c-1"); schema.CodeOf(err) != schema.CodeStreamReplaced {
		t.Errorf("Prepare on a replaced JW_PLANS = %v, want stream_replaced", err)
	}
}

// TestIdentityComparedAfterAdvisory: a prepare within identityFresh of a
// comparison that found every stream as recorded asks the server nothing
// about the streams' identity; a server advisory of a protected stream
// (here JW_REVIEWS deleted and created again) makes the very next prepare
// compare again — also inside identityFresh — and refuse with
// stream_replaced, and the guard's full comparison (woken by the
// advisory, not by its ticker) reports the stream.
func TestIdentityComparedAfterAdvisory(t *testing.T) {
	ctx := context.Background()
	e := setup(t, time.Second)
	r := e.recoverer("a")
	r.cfg.IdentityInterval = time.Hour // only an advisory wakes the guard
	stop := e.run(r)
	defer stop()
	started(t, r)

	r.identity.matched(time.Now().Add(time.Hour), r.identity.gen.Load()) // fresh for the test's whole run
	if err := r.identity.verify(ctx); err != nil {
		t.Fatalf("verify on the streams as recorded: %v", err)
	}
	before := r.identity.gen.Load()
	if err := e.topo.JS.DeleteStream(ctx, e.topo.Names().StreamName("REVIEWS")); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, e.topo.JS, e.topo.Config()); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 10*time.Second, "the advisories of JW_REVIEWS reach the guard", func() bool {
		return r.identity.gen.Load() >= before+2 // deleted, created
	})
	if err := r.identity.verify(ctx); schema.CodeOf(err) != schema.CodeStreamReplaced {
		t.Fatalf("verify after JW_REVIEWS was replaced, inside the freshness window: %v, want stream_replaced", err)
	}
	streamtest.Eventually(t, 10*time.Second, "the woken full comparison reports JW_REVIEWS", func() bool {
		ps := r.ReplacedStreams()
		return len(ps) == 1 && ps[0].Stream == e.topo.Names().StreamName("REVIEWS")
	})
}
