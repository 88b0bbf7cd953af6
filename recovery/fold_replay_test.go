package recovery_test

import (
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestFoldReviewsReplayAfterUncertain: a trusted not_executed review, then
// the reviewer's later uncertain one, then the not_executed bytes published
// again (by anyone who may publish reviews: replaying needs no key). The
// replay says nothing its signer has not said before, and later taken
// back: the uncertain review still decides, and PrepareRetry keeps
// needs_review. A review that is new (other bytes, a new signature) after
// the uncertain one still decides, as the latest trusted review.
func TestFoldReviewsReplayAfterUncertain(t *testing.T) {
	k := newKeys(t)
	ne := review(schema.VerdictNotExecuted)
	notExec, _ := json.Marshal(signReview(t, k.reviewer, *ne))
	un := review(schema.VerdictUncertain)
	un.At, un.Evidence = "2026-11-29T12:00:00Z", "ticket-432: the processor may have charged"
	uncertain, _ := json.Marshal(signReview(t, k.reviewer, *un))
	fresh := review(schema.VerdictNotExecuted)
	fresh.At, fresh.Evidence = "2026-11-29T13:00:00Z", "ticket-433: the processor confirms no charge"
	again, _ := json.Marshal(signReview(t, k.reviewer, *fresh))
	judge := func(msgs ...[]byte) []recovery.ReviewEntry {
		var es []recovery.ReviewEntry
		for i, b := range msgs {
			r, err := recovery.DecodeReview(b)
			if err == nil {
				err = recovery.VerifyReview(r, k.reviewers)
			}
			es = append(es, recovery.ReviewEntry{Review: r, Err: err, Seq: uint64(i + 1)})
		}
		return es
	}
	f := recovery.FoldReviews(testSession, "c-1", judge(notExec, uncertain, notExec))
	if f.Decides != 1 {
		t.Errorf("HOLE: the replayed not_executed (seq 3) decides over the later uncertain (seq 2): decides %d, want 1", f.Decides)
	}
	if _, err := recovery.PrepareRetry(nonIdemHistory(), "c-1", f.Review, recovery.RequireSignedReview(k.reviewers)); schema.CodeOf(err) != schema.CodeNeedsReview {
		t.Errorf("HOLE: PrepareRetry with the fold's review after a replay: %v, want needs_review", err)
	}
	f = recovery.FoldReviews(testSession, "c-1", judge(notExec, uncertain, notExec, again))
	if f.Decides != 3 {
		t.Errorf("a new not_executed after the uncertain: decides %d, want 3", f.Decides)
	}
	if _, err := recovery.PrepareRetry(nonIdemHistory(), "c-1", f.Review, recovery.RequireSignedReview(k.reviewers)); err != nil {
		t.Errorf("PrepareRetry with a new not_executed review: %v", err)
	}
}
