package recovery

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
)

// planPayload is the byte string a plan signature covers: the RFC 8785 form
// of the plan's JSON without sig (see SignPlan).
func planPayload(p schema.Plan) ([]byte, error) {
	p.Sig = ""
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return canonical(b)
}

// SignPlan returns p signed by kp, which must be an nkey user key pair (the
// recovery worker's planner key): Signer is set to kp's public key and Sig
// to the base64url (unpadded) ed25519 signature over the RFC 8785 form
// (schema.Canonical) of the plan's JSON without sig. That JSON object has
// exactly these members, as schema.Plan encodes them:
//
//	v, plan_id, session, task, tool, arguments, args_digest,
//	contract {effect, revision}, key, prior_call_id, prior_seq, basis,
//	review, issued_at, signer
//
// where review is null or the review object (v, session, call_id, operator,
// evidence, verdict, and at, signer and sig only when not empty), and
// issued_at is an RFC 3339 string as Go writes a time.Time: in UTC
// "2026-11-29T11:00:00Z", with a fraction of a second only when it is not
// zero, trailing zeros cut. PrepareRetry issues plans at whole seconds in
// UTC, so a signer or verifier in another language needs no fraction rule:
// the text is "YYYY-MM-DDTHH:MM:SSZ". arguments are compared and signed by
// their canonical form, numbers exact (docs/protocol.md §5).
//
// SignPlan signs what it is given; it does not check the plan's content.
// A key pair that is not a user key is an error wrapping ErrNotUserKey.
func SignPlan(kp nkeys.KeyPair, p schema.Plan) (schema.Plan, error) {
	signer, sig, err := sign(kp, func(pub string) ([]byte, error) {
		p.Signer = pub
		return planPayload(p)
	})
	if err != nil {
		return schema.Plan{}, fmt.Errorf("recovery: sign plan: %w", err)
	}
	p.Signer, p.Sig = signer, sig
	return p, nil
}

// unauthorized returns an error that is both cause (for errors.Is) and a
// schema unauthorized_retry error (for schema.CodeOf and errors.As).
func unauthorized(cause error, format string, args ...any) error {
	e := schema.Errorf(schema.CodeUnauthorizedRetry, format, args...)
	if cause == nil {
		return e
	}
	return fmt.Errorf("%w (%w)", e, cause)
}

// VerifyPlan checks that p is signed by a key in trusted (the planner keys):
// Signer must be an nkey user public key in the set and Sig its valid
// signature over the plan without sig (see SignPlan). A plan that does not
// verify authorizes no retry, so errors are *schema.Error with code
// unauthorized_retry, wrapping ErrUnsignedPlan, ErrNotUserKey,
// ErrUntrustedSigner or ErrBadSignature. VerifyPlan checks only the
// signature: the tool worker checks the plan against the call it runs, and
// VerifyRetries checks a retry's plan against the history. A nil or empty
// trusted set trusts no one.
func VerifyPlan(p schema.Plan, trusted TrustedKeys) error {
	if p.Signer == "" || p.Sig == "" {
		return unauthorized(ErrUnsignedPlan, "plan %s for the successor of call %q is not signed", p.PlanID, p.PriorCallID)
	}
	if cause, msg := checkSig("plan", "planner", p.Signer, p.Sig, trusted, func() ([]byte, error) { return planPayload(p) }); cause != nil {
		return unauthorized(cause, "plan %s for the successor of call %q: %s", p.PlanID, p.PriorCallID, msg)
	}
	return nil
}

// retryOf returns ev's retry link, or nil when ev is not a retry tool.call.
func retryOf(ev *schema.Event) *schema.RetryLink {
	if ev.Type != schema.TypeCall || ev.Call == nil || ev.Call.Operation == nil {
		return nil
	}
	return ev.Call.Operation.Retry
}

// PlanOf rebuilds, from a retry tool.call alone, the plan that allowed it:
// the object SignPlan signed, so that a plan signed by the recovery worker
// verifies again (VerifyPlan) from the history. The runtime records the
// plan's plan_id, basis, review, issued_at, signer and sig in the call's
// operation.retry link; everything else a plan holds is the call's. The
// members, in full (an implementation in another language builds the same
// object):
//
//	v             1
//	plan_id       operation.retry.plan_id
//	session       the event's session
//	task          operation.task
//	tool          call.tool
//	arguments     call.arguments in canonical form (schema.Canonical)
//	args_digest   schema.ArgsDigest of call.arguments
//	contract      operation.contract
//	key           operation.key
//	prior_call_id operation.retry.prior_call_id
//	prior_seq     operation.retry.prior_seq
//	basis         operation.retry.basis
//	review        operation.retry.review (null when absent)
//	issued_at     operation.retry.issued_at (the zero time when absent)
//	signer        operation.retry.signer
//	sig           operation.retry.sig
//
// An event that is not a tool.call with operation.retry is an error
// wrapping ErrNotRetry; arguments that cannot be canonicalized are
// corrupt_history. PlanOf checks nothing else: VerifyPlan and
// VerifyRetries do.
func PlanOf(ev schema.Event) (schema.Plan, error) {
	r := retryOf(&ev)
	if r == nil {
		return schema.Plan{}, fmt.Errorf("%w: event seq %d of type %q", ErrNotRetry, ev.Seq, ev.Type)
	}
	c, op := ev.Call, ev.Call.Operation
	canon, err := canonical(c.Arguments)
	if err != nil {
		return schema.Plan{}, schema.Errorf(schema.CodeCorruptHistory, "call %q (seq %d): arguments: %v", c.CallID, ev.Seq, err)
	}
	var rv *schema.Review
	if r.Review != nil {
		x := *r.Review
		rv = &x
	}
	return schema.Plan{
		V:           schema.Version,
		PlanID:      r.PlanID,
		Session:     ev.Session,
		Task:        op.Task,
		Tool:        c.Tool,
		Arguments:   canon,
		ArgsDigest:  digestOf(canon),
		Contract:    op.Contract,
		Key:         op.Key,
		PriorCallID: r.PriorCallID,
		PriorSeq:    r.PriorSeq,
		Basis:       r.Basis,
		Review:      rv,
		IssuedAt:    r.IssuedAt,
		Signer:      r.Signer,
		Sig:         r.Sig,
	}, nil
}
