package recovery

import "errors"

// Sentinel errors for why a signature, a plan or a retry failed
// verification. They are returned wrapped together with a coded
// *schema.Error: a review's with invalid_review (VerifyReview,
// PrepareRetry), a plan's and a retry's with unauthorized_retry
// (VerifyPlan, VerifyRetries, RequireSignedPlans). So both
// errors.Is(err, ErrBadSignature) and schema.CodeOf(err) ==
// schema.CodeUnauthorizedRetry hold for a forged plan.
var (
	// ErrUnsignedReview is returned when signatures are required and the
	// review carries no signer or no sig.
	ErrUnsignedReview = errors.New("recovery: review is not signed")
	// ErrUnsignedPlan is returned when a plan (or the retry link a plan is
	// rebuilt from, PlanOf) carries no signer or no sig.
	ErrUnsignedPlan = errors.New("recovery: plan is not signed")
	// ErrUntrustedSigner is returned when the signer of a review or plan is
	// not one of the trusted keys (reviewer keys for a review, planner keys
	// for a plan).
	ErrUntrustedSigner = errors.New("recovery: signer is not trusted")
	// ErrBadSignature is returned when the signature does not verify
	// against the signer's key over the canonical form of the review or
	// plan without sig.
	ErrBadSignature = errors.New("recovery: signature does not verify")
	// ErrNotUserKey is returned for a signer or trusted key that is not an
	// nkey user public key ("U…"), and by SignReview and SignPlan for a key
	// pair that is not a user key.
	ErrNotUserKey = errors.New("recovery: not an nkey user public key")
	// ErrWrongPlanID is returned for a retry whose plan_id is not
	// PlanID(session, prior_call_id), even when a trusted planner signed
	// it: the plan store would not know it as the one successor of the
	// prior call, so it could be issued (and run) twice.
	ErrWrongPlanID = errors.New("recovery: plan id does not derive from the session and prior call")
	// ErrReviewBasis is returned for a reviewed_not_executed retry whose
	// embedded review is missing, malformed, not of verdict not_executed,
	// or about another session or call than the prior attempt. (A review
	// whose signature fails wraps the signature sentinels instead.)
	ErrReviewBasis = errors.New("recovery: the review does not support a reviewed_not_executed retry")
	// ErrNotRetry is returned by PlanOf for an event that is not a retry
	// tool.call (no call, no operation, or no operation.retry).
	ErrNotRetry = errors.New("recovery: not a retry tool.call")
)
