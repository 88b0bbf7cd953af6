package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// Option adjusts one PrepareRetry call.
type Option func(*options)

type options struct {
	now     func() time.Time
	trusted TrustedKeys
	signed  bool
	// signedPlans: every retry in the planned call's chain must carry a
	// plan by one of planners (see RequireSignedPlans).
	signedPlans         bool
	planners, reviewers TrustedKeys
	// probers are the prober keys automated reviews are checked against
	// (TrustProbers); nil trusts no probe.
	probers TrustedKeys
}

// TrustProbers makes PrepareRetry (with RequireSignedReview) and the chain
// check of RequireSignedPlans accept automated reviews (schema.Review.Probe
// set) signed by one of probers, the keys of the probers. A person's review
// is still checked against the reviewer keys only, and an automated one
// against the prober keys only: a key trusted for one is not trusted for
// the other. Without this option no automated review is trusted.
func TrustProbers(probers TrustedKeys) Option {
	return func(o *options) { o.probers = probers }
}

// WithClock sets the clock that stamps Plan.IssuedAt. Defaults to
// time.Now; the time is stored in UTC, truncated to whole seconds. A nil
// clock means the default.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// RequireSignedReview makes PrepareRetry accept a review only when it is
// signed by one of the trusted reviewer keys (see VerifyReview); an unsigned
// or forged review is invalid_review. Without this option a review is
// trusted as given, which is right only offline, where the caller is the
// trusted party (the CLI's plan command). An empty set trusts no one.
func RequireSignedReview(trusted TrustedKeys) Option {
	return func(o *options) {
		o.trusted = trusted
		o.signed = true
	}
}

// RequireSignedPlans makes PrepareRetry check, before it decides, that
// jingwei authorized every retry in the chain of the call being planned
// (the call itself when it is a retry, and each earlier retry back to the
// first attempt), exactly as VerifyRetries checks a whole history: each
// retry's plan, rebuilt from the call (PlanOf), must verify under
// planners, carry the plan id PlanID(session, prior_call_id), and for basis
// reviewed_not_executed rest on a not_executed review of the prior call
// signed by a key in reviewers. Otherwise PrepareRetry fails with
// unauthorized_retry, whatever the call's outcome: a retry tool.call that
// anyone but jingwei appended to the log (a forged call that "never
// started", say) gets no plan. History errors come first, then this check,
// then the review and the decision. Without this option retries are
// trusted as recorded (offline, and for logs written before plans were
// signed). Empty sets trust no one.
func RequireSignedPlans(planners, reviewers TrustedKeys) Option {
	return func(o *options) {
		o.signedPlans = true
		o.planners, o.reviewers = planners, reviewers
	}
}

// PlanID returns the deterministic plan id for the successor of priorCallID
// in session: "p-" followed by the first 32 hex digits of
// sha256(session NUL priorCallID). Each attempt has at most one successor, so
// re-issuing the same plan yields the same id and is deduplicated downstream.
func PlanID(session, priorCallID string) string {
	h := sha256.New()
	h.Write([]byte(session))
	h.Write([]byte{0})
	h.Write([]byte(priorCallID))
	var sum [sha256.Size]byte
	return "p-" + hex.EncodeToString(h.Sum(sum[:0]))[:32]
}

// PrepareRetry inspects callID in h (see Inspect, whose errors it returns
// unchanged), applies review and returns a plan for one new attempt that
// reuses the call's operation key, arguments (in canonical form) and
// contract. review may be nil.
//
// After the history, the review is checked: one that is malformed
// (schema.Review.Validate: version, session id, empty operator, unknown
// verdict, …), for another call or session, or (with RequireSignedReview)
// unsigned or not signed by a trusted key, is invalid_review; operator or
// evidence over 1,024 bytes is field_too_long.
// Then: a review with verdict completed refuses the retry (completed),
// whatever the outcome; a completed outcome is completed; a not-started
// outcome gives basis not_started; an uncertain call under a read-only or
// idempotent contract gives uncertain_safe; any other uncertain call needs a
// review with verdict not_executed (basis reviewed_not_executed), and
// without one fails with needs_review (a verdict uncertain never lifts it).
// Plan.Review carries the review only when it is the basis.
//
// With RequireSignedPlans, the retries of the call's chain are checked
// after the history and before the review (see there). The plan's
// IssuedAt is the clock's time (WithClock) in UTC truncated to whole
// seconds, so its text form is unambiguous for signers and verifiers in
// other languages (see SignPlan). The plan is unsigned: sign it with
// SignPlan before it leaves the process.
//
// PrepareRetry writes nothing: issuing the plan exactly once is the caller's
// job.
func PrepareRetry(h schema.History, callID string, review *schema.Review, opts ...Option) (schema.Plan, error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	s, err := scanFor(h, callID, o.signedPlans)
	if err != nil {
		return schema.Plan{}, err
	}
	if o.signedPlans {
		if err := s.authorizeChain(o.planners, o.reviewers, o.probers); err != nil {
			return schema.Plan{}, err
		}
	}
	a := s.assess()
	if err := s.taskStopped(a); err != nil {
		return schema.Plan{}, err
	}
	if review != nil {
		if err := checkReview(review, s.session, callID, &o); err != nil {
			return schema.Plan{}, err
		}
		if review.Verdict == schema.VerdictCompleted {
			return schema.Plan{}, schema.Errorf(schema.CodeCompleted, "call %q: review by %q (%s) says it completed: no retry", callID, review.Operator, review.Evidence)
		}
	}
	p := schema.Plan{
		V:           schema.Version,
		PlanID:      PlanID(s.session, callID),
		Session:     s.session,
		Task:        a.Task,
		Tool:        a.Tool,
		Contract:    a.Contract,
		Key:         a.Key,
		PriorCallID: callID,
		PriorSeq:    s.at(s.idx).seq,
	}
	switch {
	case a.Outcome == schema.OutcomeCompleted:
		return schema.Plan{}, schema.Errorf(schema.CodeCompleted, "call %q completed (result %s): no retry", callID, a.Evidence)
	case a.Outcome == schema.OutcomeNotStarted:
		p.Basis = schema.BasisNotStarted
	case a.Decision == schema.DecisionRetryAllowed:
		p.Basis = schema.BasisUncertainSafe
	case review != nil && review.Verdict == schema.VerdictNotExecuted:
		p.Basis = schema.BasisReviewedNotExecuted
		r := *review
		p.Review = &r
	case review != nil:
		return schema.Plan{}, schema.Errorf(schema.CodeNeedsReview, "call %q is uncertain (%s) under contract %s: review verdict %s does not allow a retry, not_executed would", callID, a.Evidence, a.Contract, review.Verdict)
	default:
		return schema.Plan{}, schema.Errorf(schema.CodeNeedsReview, "call %q is uncertain (%s) under contract %s: a retry needs a review with verdict not_executed", callID, a.Evidence, a.Contract)
	}
	p.Arguments = s.canon // canonicalized by the scan: the call did not complete
	p.ArgsDigest = s.digest
	p.IssuedAt = o.now().UTC().Truncate(time.Second)
	return p, nil
}
