package effect

import "errors"

// Sentinel errors returned by this package; match them with errors.Is.
var (
	// ErrUnknownEffect is returned for a wire value or number that is not
	// one of the declared effects.
	ErrUnknownEffect = errors.New("effect: unknown effect")
	// ErrEmptyRevision is returned by Contract.Validate for an empty revision.
	ErrEmptyRevision = errors.New("effect: contract revision is empty")
	// ErrRevisionTooLong is returned by Contract.Validate for a revision over
	// MaxRevisionBytes.
	ErrRevisionTooLong = errors.New("effect: contract revision too long")
)
