package recovery

import (
	"fmt"

	"github.com/jingwei/jingwei/schema"
)

// authorize checks the plan rebuilt from the retry callID at seq: signed by
// a planner, for the successor of its prior call, and for basis
// reviewed_not_executed resting on a trusted not_executed review of that
// prior call. The error is unauthorized_retry naming seq, the call and what
// failed.
func authorize(p *schema.Plan, seq uint64, callID string, planners, reviewers, probers TrustedKeys) error {
	fail := func(cause error, format string, args ...any) error {
		return unauthorized(cause, "retry call %q (seq %d) of call %q: %s", callID, seq, p.PriorCallID, fmt.Sprintf(format, args...))
	}
	if p.Signer == "" || p.Sig == "" {
		return fail(ErrUnsignedPlan, "plan %s is not signed: no trusted planner issued it", p.PlanID)
	}
	if cause, msg := checkSig("plan", "planner", p.Signer, p.Sig, planners, func() ([]byte, error) { return planPayload(*p) }); cause != nil {
		return fail(cause, "plan %s: %s", p.PlanID, msg)
	}
	if want := PlanID(p.Session, p.PriorCallID); p.PlanID != want {
		return fail(ErrWrongPlanID, "plan id %s is not %s, the id of the successor of call %q in session %q", p.PlanID, want, p.PriorCallID, p.Session)
	}
	if p.Basis != schema.BasisReviewedNotExecuted {
		return nil
	}
	rv := p.Review
	if rv == nil {
		return fail(ErrReviewBasis, "basis reviewed_not_executed without a review")
	}
	if rv.Signer == "" || rv.Sig == "" {
		return fail(ErrUnsignedReview, "the review by %q it rests on is not signed", rv.Operator)
	}
	keys, role := keysFor(rv, reviewers, probers)
	if cause, msg := checkSig("review", role, rv.Signer, rv.Sig, keys, func() ([]byte, error) { return reviewPayload(*rv) }); cause != nil {
		return fail(cause, "the review by %q it rests on: %s", rv.Operator, msg)
	}
	if err := rv.Validate(); err != nil {
		return fail(ErrReviewBasis, "the review it rests on is malformed: %v", err)
	}
	switch {
	case rv.Session != p.Session || rv.CallID != p.PriorCallID:
		return fail(ErrReviewBasis, "the review it rests on is of call %q in session %q", rv.CallID, rv.Session)
	case rv.Verdict != schema.VerdictNotExecuted:
		return fail(ErrReviewBasis, "the review by %q it rests on has verdict %s, not not_executed", rv.Operator, rv.Verdict)
	}
	return nil
}

// VerifyRetries checks that jingwei authorized every retry in h: each
// tool.call with operation.retry must carry (PlanOf) a plan that verifies
// under planners (VerifyPlan), whose plan_id is PlanID(session,
// prior_call_id), and — for basis reviewed_not_executed — an embedded
// review signed by a key in reviewers (VerifyReview), of verdict
// not_executed, for that session and the prior call. The first retry that
// fails is an unauthorized_retry *schema.Error naming its seq, its call id,
// the prior call and what failed, wrapping ErrUnsignedPlan,
// ErrUntrustedSigner, ErrBadSignature, ErrNotUserKey, ErrWrongPlanID,
// ErrUnsignedReview or ErrReviewBasis; retry arguments that cannot be
// canonicalized are corrupt_history. An error yielded by h is returned as
// Inspect returns it. A history without retries passes. Nil (or empty)
// key sets trust no one.
//
// VerifyRetries checks only the retries: Inspect verifies the history's
// structure. It costs one signature check per retry (two for a reviewed
// one) and keeps nothing between events. PrepareRetry with
// RequireSignedPlans applies the same check to the chain of the call it
// plans.
func VerifyRetries(h schema.History, planners, reviewers TrustedKeys) error {
	return VerifyRetriesBy(h, planners, reviewers, nil)
}

// VerifyRetriesBy is VerifyRetries that also trusts automated reviews
// (schema.Review.Probe set) signed by a key in probers: a retry planned on
// a probe's authoritative not_found rests on such a review. A person's
// review is checked against reviewers only, a probe's against probers only.
func VerifyRetriesBy(h schema.History, planners, reviewers, probers TrustedKeys) error {
	if h == nil {
		return nil
	}
	n := 0
	for ev, err := range h {
		if err != nil {
			if schema.CodeOf(err) != "" {
				return err
			}
			return fmt.Errorf("recovery: reading history after %d events: %w", n, err)
		}
		n++
		if retryOf(&ev) == nil {
			continue
		}
		p, err := PlanOf(ev)
		if err != nil {
			return err
		}
		if err := authorize(&p, ev.Seq, ev.Call.CallID, planners, reviewers, probers); err != nil {
			return err
		}
	}
	return nil
}

// authorizeChain checks the retries of the target's chain, first retry
// first, with authorize: the scan kept their retry links, and every
// attempt of a chain has the target's tool, task, key, contract and
// canonical arguments (the scan checked that), so each plan is rebuilt as
// PlanOf would rebuild it from the call.
func (s *scan) authorizeChain(planners, reviewers, probers TrustedKeys) error {
	var retries []int32
	for i := s.idx; s.at(i).prior >= 0; i = s.at(i).prior {
		retries = append(retries, i)
	}
	for k := len(retries) - 1; k >= 0; k-- {
		c := s.at(retries[k])
		l := s.links[retries[k]]
		p := schema.Plan{
			V:           schema.Version,
			PlanID:      l.PlanID,
			Session:     s.session,
			Task:        c.task,
			Tool:        c.tool,
			Arguments:   s.canon,
			ArgsDigest:  s.digest,
			Contract:    c.contract(),
			Key:         c.key,
			PriorCallID: l.PriorCallID,
			PriorSeq:    l.PriorSeq,
			Basis:       l.Basis,
			Review:      l.Review,
			IssuedAt:    l.IssuedAt,
			Signer:      l.Signer,
			Sig:         l.Sig,
		}
		if err := authorize(&p, c.seq, c.id, planners, reviewers, probers); err != nil {
			return err
		}
	}
	return nil
}
