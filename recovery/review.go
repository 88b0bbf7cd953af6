package recovery

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
)

// TrustedKeys is a set of nkey user public keys ("U…"): the reviewer keys
// whose reviews are trusted, or the planner (recovery worker) keys whose
// plans are. The zero (nil) value trusts no one. Safe for concurrent reads;
// build it once.
type TrustedKeys map[string]struct{}

// NewTrustedKeys returns the set of the given user public keys; a key that is
// not a valid nkey user public key is an error wrapping ErrNotUserKey.
func NewTrustedKeys(keys ...string) (TrustedKeys, error) {
	t := make(TrustedKeys, len(keys))
	for _, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("%w: %q", ErrNotUserKey, k)
		}
		t[k] = struct{}{}
	}
	return t, nil
}

// ParseTrustedKeys reads a trusted-keys file (reviewers, approvers or
// planners): the keys of ParseNamedKeys, without their names. Each line is
// "<public key> <name>" or, the older form, user public keys separated by
// white space; blank lines and lines starting with # are ignored. Errors
// name the line.
func ParseTrustedKeys(text []byte) (TrustedKeys, error) {
	t, _, err := ParseNamedKeys(text)
	return t, err
}

// Has reports whether pub is in the set.
func (t TrustedKeys) Has(pub string) bool {
	_, ok := t[pub]
	return ok
}

// reviewPayload is the byte string a review signature covers: the RFC 8785
// form of the review's JSON without sig.
func reviewPayload(r schema.Review) ([]byte, error) {
	r.Sig = ""
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return canonical(b)
}

// SignReview returns r signed by kp, which must be an nkey user key pair:
// Signer is set to kp's public key and Sig to the base64url (unpadded)
// ed25519 signature over the RFC 8785 form of the review without sig.
func SignReview(kp nkeys.KeyPair, r schema.Review) (schema.Review, error) {
	signer, sig, err := sign(kp, func(pub string) ([]byte, error) {
		r.Signer = pub
		return reviewPayload(r)
	})
	if err != nil {
		return schema.Review{}, fmt.Errorf("recovery: sign review: %w", err)
	}
	r.Signer, r.Sig = signer, sig
	return r, nil
}

// invalidReview returns an error that is both cause (for errors.Is) and a
// schema invalid_review error (for schema.CodeOf and errors.As).
func invalidReview(cause error, format string, args ...any) error {
	e := schema.Errorf(schema.CodeInvalidReview, format, args...)
	if cause == nil {
		return e
	}
	return fmt.Errorf("%w (%w)", e, cause)
}

// VerifyReview checks that r is signed by a key in trusted: Signer must be an
// nkey user public key in the set and Sig its valid signature over the
// review without sig. Errors are invalid_review and wrap ErrUnsignedReview,
// ErrNotUserKey, ErrUntrustedSigner or ErrBadSignature. VerifyReview checks
// the signature, and that the review names its operator (a blank one is
// invalid_review, as schema.Review.Validate says); PrepareRetry checks the
// content.
func VerifyReview(r schema.Review, trusted TrustedKeys) error {
	if strings.TrimSpace(r.Operator) == "" {
		return invalidReview(nil, "review of call %q has a blank operator", r.CallID)
	}
	if r.Signer == "" || r.Sig == "" {
		return invalidReview(ErrUnsignedReview, "review of call %q by %q is not signed", r.CallID, r.Operator)
	}
	if cause, msg := checkSig("review", "reviewer", r.Signer, r.Sig, trusted, func() ([]byte, error) { return reviewPayload(r) }); cause != nil {
		return invalidReview(cause, "%s", msg)
	}
	return nil
}

// VerifyReviewBy checks r's signature against the keys of its source: a
// person's review (no probe) must be signed by a key in reviewers, an
// automated review (schema.Review.Probe set) by a key in probers. A prober
// key cannot sign a person's review, nor a reviewer key a probe's: the
// provenance a review claims is the one its key was trusted for. Errors are
// VerifyReview's.
func VerifyReviewBy(r schema.Review, reviewers, probers TrustedKeys) error {
	if r.Automated() {
		if strings.TrimSpace(r.Operator) == "" {
			return invalidReview(nil, "review of call %q has a blank operator", r.CallID)
		}
		if r.Signer == "" || r.Sig == "" {
			return invalidReview(ErrUnsignedReview, "automated review of call %q by probe %q is not signed", r.CallID, r.Probe)
		}
		if cause, msg := checkSig("automated review", "prober", r.Signer, r.Sig, probers, func() ([]byte, error) { return reviewPayload(r) }); cause != nil {
			return invalidReview(cause, "%s", msg)
		}
		return nil
	}
	return VerifyReview(r, reviewers)
}

// keysFor returns the keys r must be signed by, and their role's name.
func keysFor(r *schema.Review, reviewers, probers TrustedKeys) (TrustedKeys, string) {
	if r.Automated() {
		return probers, "prober"
	}
	return reviewers, "reviewer"
}

// checkSig verifies sig, the unpadded base64url ed25519 signature by signer
// over payload(), with signer a trusted nkey user public key. It returns
// nil, or the sentinel for what failed and a message saying so about the
// signed thing (what: "review", "plan") and its signers (role: "reviewer",
// "planner").
func checkSig(what, role, signer, sig string, trusted TrustedKeys, payload func() ([]byte, error)) (error, string) {
	if !nkeys.IsValidPublicUserKey(signer) {
		return ErrNotUserKey, fmt.Sprintf("%s signer %q is not an nkey user public key", what, signer)
	}
	if !trusted.Has(signer) {
		return ErrUntrustedSigner, fmt.Sprintf("%s signer %s is not a trusted %s key", what, signer, role)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return ErrBadSignature, fmt.Sprintf("%s sig is not unpadded base64url: %v", what, err)
	}
	kp, err := nkeys.FromPublicKey(signer)
	if err != nil {
		return ErrNotUserKey, fmt.Sprintf("%s signer %q: %v", what, signer, err)
	}
	b, err := payload()
	if err != nil {
		return ErrBadSignature, fmt.Sprintf("%s cannot be canonicalized: %v", what, err)
	}
	if err := kp.Verify(b, raw); err != nil {
		return ErrBadSignature, fmt.Sprintf("%s signature by %s does not verify", what, signer)
	}
	return nil, ""
}

// sign returns the public key of kp, which must be an nkey user key pair,
// and its signature over payload(signer) in unpadded base64url.
func sign(kp nkeys.KeyPair, payload func(signer string) ([]byte, error)) (signer, sig string, err error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return "", "", err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", "", fmt.Errorf("%w: %q", ErrNotUserKey, pub)
	}
	b, err := payload(pub)
	if err != nil {
		return "", "", err
	}
	raw, err := kp.Sign(b)
	if err != nil {
		return "", "", err
	}
	return pub, base64.RawURLEncoding.EncodeToString(raw), nil
}

// checkReview checks a review's form (schema.Review.Validate), that it is
// about the call being planned, then its signature when required.
func checkReview(r *schema.Review, session, callID string, o *options) error {
	if err := r.Validate(); err != nil {
		return err // invalid_review, or field_too_long for operator or evidence
	}
	switch {
	case r.Session != session:
		return invalidReview(nil, "review is for session %q, the history is of session %q", r.Session, session)
	case r.CallID != callID:
		return invalidReview(nil, "review is for call %q, not %q", r.CallID, callID)
	case strings.TrimSpace(r.Operator) == "":
		return invalidReview(nil, "review of call %q has a blank operator", callID)
	}
	if o.signed {
		return VerifyReviewBy(*r, o.trusted, o.probers)
	}
	return nil
}

// DecodeReview decodes a review message (one JSON object) strictly, with
// schema.DecodeReview: malformed JSON, duplicate member names, a missing or
// ill-formed field are invalid_review, operator or evidence over 1,024
// bytes field_too_long; unknown members are ignored. Whether the review fits
// the call is checked by PrepareRetry, its signature by VerifyReview.
func DecodeReview(b []byte) (schema.Review, error) {
	return schema.DecodeReview(b)
}
