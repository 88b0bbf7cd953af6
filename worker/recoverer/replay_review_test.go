package recoverer

import (
	"context"
	"errors"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestPrepareReplayedNotExecutedAfterUncertain: a trusted reviewer signs
// not_executed for an uncertain non-idempotent call, then, learning more,
// signs uncertain: the call needs review again. Anyone who may publish on
// jw.reviews.<session> and read JW_REVIEWS — the reviewer role's
// credentials without any signing key — publishes the old not_executed
// review again, byte for byte. The replay is not a new statement of the
// reviewer: it must not decide, and prepare must still answer
// needs_review (no plan on a verdict its signer took back).
func TestPrepareReplayedNotExecutedAfterUncertain(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	w := e.writer("s-rp", "w1")
	w.call("pay", "payments.charge", effect.NonIdempotent, "k-pay")
	w.started("pay")
	w.result("pay", schema.StatusTimeout, "")

	notExec := review(t, e.reviewer, "s-rp", "pay", schema.VerdictNotExecuted)
	e.publishReview("s-rp", notExec)
	later, err := recovery.SignReview(e.reviewer, schema.Review{V: 1, Session: "s-rp", CallID: "pay", Operator: "alice@ops",
		Evidence: "ticket-2: the processor may have charged", Verdict: schema.VerdictUncertain, At: "2026-11-30T01:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	e.publishReview("s-rp", later)
	if _, err := r.Prepare(ctx, "s-rp", "pay"); !errors.Is(err, schema.ErrNeedsReview) {
		t.Fatalf("prepare after the reviewer's uncertain: %v, want needs_review", err)
	}
	// The replay: the same bytes again, published by a client without any
	// signing key.
	e.publishReview("s-rp", mustJSON(t, notExec))
	if p, err := r.Prepare(ctx, "s-rp", "pay"); !errors.Is(err, schema.ErrNeedsReview) {
		t.Fatalf("HOLE: a replayed not_executed review decides over the reviewer's later uncertain: prepare %v (plan %s basis %s), want needs_review", err, p.PlanID, p.Basis)
	}
}
