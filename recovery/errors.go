package recovery

import "errors"

// Sentinel errors for why a review failed verification. They are returned
// wrapped together with a schema invalid_review error, so both
// errors.Is(err, ErrBadSignature) and schema.CodeOf(err) ==
// schema.CodeInvalidReview hold.
var (
	// ErrUnsignedReview is returned when signatures are required and the
	// review carries no signer or no sig.
	ErrUnsignedReview = errors.New("recovery: review is not signed")
	// ErrUntrustedSigner is returned when the review's signer is not one of
	// the trusted reviewer keys.
	ErrUntrustedSigner = errors.New("recovery: review signer is not trusted")
	// ErrBadSignature is returned when the signature does not verify
	// against the signer's key over the review's canonical form.
	ErrBadSignature = errors.New("recovery: review signature does not verify")
	// ErrNotUserKey is returned for a signer or trusted key that is not an
	// nkey user public key ("U…"), and by SignReview for a key pair that is
	// not a user key.
	ErrNotUserKey = errors.New("recovery: not an nkey user public key")
)
