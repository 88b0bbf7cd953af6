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
	if err := e.topo.JS.DeleteStream(ctx, e.topo.StreamName("REVIEWS")); err != nil {
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
}
