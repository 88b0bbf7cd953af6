package demo

import "errors"

// Errors of Run.
var (
	// ErrInvalidConfig is returned for a Config with an invalid field.
	ErrInvalidConfig = errors.New("demo: invalid config")
	// ErrChildFailed is returned when a child process exits on its own; the
	// message holds the end of its log.
	ErrChildFailed = errors.New("demo: child process failed")
	// ErrTimeout is returned when a step does not happen in time; the
	// message names the step.
	ErrTimeout = errors.New("demo: step timed out")
	// ErrStory is returned when the pipeline does something the story does
	// not expect (e.g. two order records); the message says what.
	ErrStory = errors.New("demo: unexpected outcome")
)
