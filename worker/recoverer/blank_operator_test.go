package recoverer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestBlankOperatorRefusedEverywhere: a review signed by a trusted key
// whose operator is blank (" ") was accepted, and final, by the review
// checker (the call left "awaiting review") and by status, while prepare
// refused it as invalid_review. It must be refused alike everywhere: the
// checker leaves the call awaiting review, status judges the review
// invalid_review, prepare refuses it.
func TestBlankOperatorRefusedEverywhere(t *testing.T) {
	const ttl = time.Second
	e := setup(t, ttl)
	as := e.assessments()
	r := e.recoverer("a")
	e.run(r)
	started(t, r)

	w := e.writer("s-blank", "w-1")
	w.renew(t, ttl/4)
	w.call("pay-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("pay-1")
	w.result("pay-1", schema.StatusFailed, "")
	as.wait(t, "s-blank", "pay-1", 5*time.Second)
	streamtest.Eventually(t, 5*time.Second, "pay-1 awaits review", func() bool {
		return slices.Contains(keysOf(statusView(t, r).AwaitingReview), "s-blank/pay-1")
	})

	for _, blank := range []string{" ", "\t \n"} {
		rv, err := recovery.SignReview(e.reviewer, schema.Review{V: 1, Session: "s-blank", CallID: "pay-1", Operator: blank, Evidence: "ticket-1", Verdict: schema.VerdictCompleted, At: "2026-11-30T00:00:00Z"})
		if err != nil {
			t.Fatal(err)
		}
		e.publishReview("s-blank", rv)
	}
	ctx := context.Background()
	info, err := e.topo.Reviews.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	cons, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("REVIEWS"), r.reviews.consumerName("reviews"))
	if err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 15*time.Second, "the checker judged both reviews", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= last
	})
	if !slices.Contains(keysOf(statusView(t, r).AwaitingReview), "s-blank/pay-1") {
		t.Errorf("HOLE: a completed review with a blank operator settled pay-1: it no longer awaits review")
	}
	checks, err := r.Reviews(ctx, "s-blank", "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	// A review that is not well formed is not listed (as one that names
	// no call); one listed must be refused.
	for _, c := range checks {
		if c.Accepted || c.Decides || c.Code != string(schema.CodeInvalidReview) {
			t.Errorf("HOLE: status judges the review by %q accepted=%v decides=%v code=%q, want refused as invalid_review", c.Review.Operator, c.Accepted, c.Decides, c.Code)
		}
	}
	if _, err := r.Prepare(ctx, "s-blank", "pay-1"); schema.CodeOf(err) != schema.CodeNeedsReview {
		t.Errorf("Prepare = %v, want needs_review (no review stands)", err)
	}
}
