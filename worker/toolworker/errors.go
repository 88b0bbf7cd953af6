package toolworker

import "errors"

var (
	// ErrInvalidConfig is returned by New for a Config that misses a
	// required field or has an invalid value; the message names the field.
	ErrInvalidConfig = errors.New("toolworker: invalid config")

	// ErrRunning is returned by Run when the worker is already running or
	// has run before: a Worker runs once.
	ErrRunning = errors.New("toolworker: Run called twice")

	// ErrInvalidRequest describes a tool request that cannot become a call;
	// such a request is terminated and logged.
	ErrInvalidRequest = errors.New("toolworker: invalid request")
)

// errGivenBack ends the hold of a session the worker gives back itself.
var errGivenBack = errors.New("session given back")
