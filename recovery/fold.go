package recovery

import (
	"fmt"

	"github.com/jingwei/jingwei/schema"
)

// ReviewEntry is one review of a call as read from the review stream
// (jw.reviews.<session>), with the caller's judgement of it.
type ReviewEntry struct {
	Review schema.Review
	// Err is why the caller did not accept the review: malformed, unsigned
	// or not signed by a trusted reviewer key (VerifyReview), for a call
	// that is not in the log, …. Nil means a trusted review. FoldReviews
	// passes a non-nil Err through and otherwise ignores the entry.
	Err error
	// Seq is the review's position in its stream (its JW_REVIEWS
	// sequence), used in messages only; 0 names the entry by its index.
	Seq uint64
}

// ReviewFold is what FoldReviews makes of the reviews of one call.
type ReviewFold struct {
	// Decides is the index of the deciding review, the latest one that
	// stands, or -1 when none stands.
	Decides int
	// Review is a copy of the deciding review, or nil when none stands:
	// what PrepareRetry takes.
	Review *schema.Review
	// Final reports that a trusted completed review is on record: the call
	// is settled and no later review lifts the refusal.
	Final bool
	// Rejected holds one error per entry: nil when the review stands, else
	// why it does not — the entry's own Err, an invalid_review
	// *schema.Error for a review of another session or call or with an
	// unknown verdict, or a review_conflict *schema.Error for a trusted
	// review that contradicts an earlier trusted completed one.
	Rejected []error
}

// FoldReviews applies the rule of docs/protocol.md §10 to the reviews of callID in
// session, given in stream order, each already judged acceptable or not by
// the caller (ReviewEntry.Err):
//
//   - once a trusted review with verdict completed is on record, the call is
//     final: every later trusted review with another verdict is rejected
//     with review_conflict (and should be logged), whatever it says; a later
//     completed review agrees and stands. A review published again byte for
//     byte after the completed one — an older not_executed, say — is a later
//     review like any other and is rejected too: order in the stream, not
//     the review's own at, decides.
//   - otherwise the latest trusted review decides. Earlier trusted reviews
//     stand (they were not wrong when given) but no longer decide. A
//     review published again byte for byte (the same signer and signature
//     as an earlier standing one: ed25519 signs the same review the same
//     way; unsigned reviews are never taken for replays) stands but counts
//     where it first appeared: a replay says nothing new, so an old
//     not_executed replayed after its reviewer's later uncertain never
//     decides again (replaying needs no key).
//   - reviews the caller did not accept change nothing; their Err is
//     passed through.
//   - automated reviews (a probe's, schema.Review.Probe set) rank below a
//     person's: an automated uncertain is evidence only (it stands, and is
//     shown, but never decides: a probe that could not decide takes no
//     verdict away from anyone), and an automated not_executed after a
//     person's standing review is review_conflict (a probe does not
//     overrule a person). A person's review after a probe's decides as any
//     later review does, so a person's completed overrules a probe's
//     not_executed; a probe's completed (the effect was found) is final
//     like any completed.
//
// The deciding review goes to PrepareRetry, which refuses on completed and
// keeps needs_review on uncertain (an uncertain verdict never lifts it). A
// recovery worker uses the same fold for prepare and for status, so both
// say the same. FoldReviews is pure and keeps nothing; an empty list
// decides nothing (Decides -1).
func FoldReviews(session, callID string, entries []ReviewEntry) ReviewFold {
	f := ReviewFold{Decides: -1, Rejected: make([]error, len(entries))}
	final := -1 // the first trusted completed review
	seen := map[[2]string]bool{}
	person := -1 // the first standing person's review
	for i := range entries {
		e := &entries[i]
		r := &e.Review
		switch {
		case e.Err != nil:
			f.Rejected[i] = e.Err
		case r.Session != session || r.CallID != callID:
			f.Rejected[i] = schema.Errorf(schema.CodeInvalidReview, "review at %s is of call %q in session %q, not of call %q in session %q", at(entries, i), r.CallID, r.Session, callID, session)
		case !r.Verdict.Valid():
			f.Rejected[i] = schema.Errorf(schema.CodeInvalidReview, "review at %s of call %q has unknown verdict %q", at(entries, i), callID, r.Verdict)
		case final >= 0 && r.Verdict != schema.VerdictCompleted:
			c := &entries[final].Review
			f.Rejected[i] = schema.Errorf(schema.CodeReviewConflict, "review at %s of call %q by %q (verdict %s, evidence %q) contradicts the completed review at %s by %q (evidence %q): completed is final",
				at(entries, i), callID, r.Operator, r.Verdict, r.Evidence, at(entries, final), c.Operator, c.Evidence)
		case r.Sig != "" && seen[[2]string{r.Signer, r.Sig}]:
			// a replay of a standing review: it stands where it first came
		case r.Automated() && r.Verdict == schema.VerdictUncertain:
			// a probe that could not decide: evidence for the person who
			// reviews, never a verdict
		case r.Automated() && r.Verdict == schema.VerdictNotExecuted && person >= 0:
			p := &entries[person].Review
			f.Rejected[i] = schema.Errorf(schema.CodeReviewConflict, "automated review at %s of call %q by probe %q (verdict not_executed) comes after the review at %s by %q (verdict %s): a probe does not overrule a person",
				at(entries, i), callID, r.Probe, at(entries, person), p.Operator, p.Verdict)
		default:
			if !r.Automated() && person < 0 {
				person = i
			}
			if r.Sig != "" {
				seen[[2]string{r.Signer, r.Sig}] = true
			}
			f.Decides = i
			if r.Verdict == schema.VerdictCompleted && final < 0 {
				final = i
			}
		}
	}
	f.Final = final >= 0
	if f.Decides >= 0 {
		r := entries[f.Decides].Review
		f.Review = &r
	}
	return f
}

// at names entry i of entries in a message: its stream seq, else its index.
func at(entries []ReviewEntry, i int) string {
	if s := entries[i].Seq; s != 0 {
		return fmt.Sprintf("seq %d", s)
	}
	return fmt.Sprintf("index %d", i)
}
