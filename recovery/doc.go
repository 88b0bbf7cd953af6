// Package recovery classifies the calls of a confirmed session history and
// prepares retry plans (DESIGN §2).
//
// Inspect reads a history once, verifies it (physical order, one session,
// call/started/result pairing, retry chains, field limits) and classifies
// the latest attempt of one call: completed, not started or uncertain, with
// the decision refuse, retry_allowed or needs_review. PrepareRetry applies a
// review on top of that and returns a single-use plan that reuses the call's
// operation key. Errors are *schema.Error values with the stable codes of
// DESIGN §2 (corrupt_history, unknown_call, …); match them with errors.Is
// against the schema sentinels or read schema.CodeOf.
//
// Reviews can be signed with an nkey user key (SignReview) and checked against
// a set of trusted reviewer keys (VerifyReview, RequireSignedReview).
//
// The package is pure: it does no I/O and imports no NATS client. Memory is
// proportional to the number of calls in a history, not to its events: only
// the arguments of the call being inspected are kept.
package recovery
