package fence

import "errors"

var (
	// ErrStale is returned by Write and Create when the resource was
	// written by a newer writer of the same session: the token's writer has
	// been fenced and must not land its side effect. The error names both
	// epochs.
	ErrStale = errors.New("fence: a newer writer of the session wrote this resource")
	// ErrExists is returned by Create when the resource already holds a
	// value (whoever wrote it).
	ErrExists = errors.New("fence: the resource already holds a value")
	// ErrContended is returned when the resource kept changing under a write
	// for Config.MaxAttempts reads: nothing was written.
	ErrContended = errors.New("fence: the resource kept changing; nothing written")
	// ErrInvalid is returned for an empty subject or a token without a
	// session.
	ErrInvalid = errors.New("fence: invalid write")
)
