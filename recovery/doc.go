// Package recovery classifies the calls of a confirmed session history and
// prepares retry plans (docs/protocol.md §9).
//
// It is the planner: pure functions, no I/O and no process. The recovery
// worker, the process that reads the streams, calls these functions and
// writes their results back, is package worker/recoverer.
//
// Inspect reads a history once, verifies it (physical order, one session,
// call/started/result pairing, retry chains, fence epochs, field limits)
// and classifies the latest attempt of one call: completed, not started or
// uncertain, with the decision refuse, retry_allowed or needs_review.
// PrepareRetry applies a review on top of that and returns a single-use
// plan that reuses the call's operation key. Errors are *schema.Error
// values with the stable codes of docs/protocol.md §9 (corrupt_history, unknown_call,
// …); match them with errors.Is against the schema sentinels or read
// schema.CodeOf.
//
// The "open call" rule is written once, in [OpenCalls]: a call is open
// from its tool.call until its tool.result or a session.fenced of a newer
// epoch. The recovery worker's classifier keeps its open calls with it,
// and a takeover finds the calls its fence closed with [OpenIn].
//
// Trust is checked by signatures over RFC 8785 forms, with nkey user keys:
//
//   - reviews are signed by reviewers (SignReview) and checked against the
//     trusted reviewer keys (VerifyReview, RequireSignedReview);
//   - plans are signed by the recovery worker (SignPlan) and checked
//     against the trusted planner keys (VerifyPlan) before a tool worker
//     runs one;
//   - a retry recorded in the log carries its plan's signature, so the plan
//     can be rebuilt from the call (PlanOf) and every retry checked offline
//     (VerifyRetries, or RequireSignedPlans for the chain being planned):
//     a retry jingwei did not authorize is unauthorized_retry;
//   - the reviews of one call fold into one decision (FoldReviews): a
//     trusted completed review is final, and a later review that
//     contradicts it is review_conflict.
//
// The package is pure: it does no I/O and imports no NATS client. Memory is
// proportional to the number of calls in a history, not to its events: only
// the arguments of the call being inspected are kept.
package recovery
