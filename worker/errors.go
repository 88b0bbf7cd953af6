package worker

import (
	"errors"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// The runtime's errors are *schema.Error values with the runtime's codes
// (schema.CodeUnknownTool, schema.CodeInvalidCall, schema.CodePlan…,
// schema.CodeRejected with Stage, schema.CodeFenced, schema.CodeLog, the
// result statuses): match them with errors.Is against the schema
// sentinels (schema.ErrPlanRefused matches every plan refusal) or read
// the code with schema.CodeOf. The errors below are the package's own.

// Registry errors.
var (
	// ErrDuplicateTool is returned by Registry.Register for a name that is
	// already registered.
	ErrDuplicateTool = errors.New("worker: tool already registered")
	// ErrInvalidTool is returned by Registry.Register for a tool without a
	// name or body, with an invalid contract, or with an input schema that
	// does not compile.
	ErrInvalidTool = errors.New("worker: invalid tool")
	// ErrInvalidConfig is returned by New for a Config that misses a
	// required field.
	ErrInvalidConfig = errors.New("worker: invalid config")
)

// bodyError is how a body says more than "failed": see Retryable and
// BudgetExhausted.
type bodyError struct {
	err       error
	status    schema.Status
	retryable bool
}

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// Retryable marks a body's error as retryable: the result is failed with
// retryable: true. The flag is advice for the host; it never proves the
// call had no effect.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &bodyError{err: err, status: schema.StatusFailed, retryable: true}
}

// BudgetExhausted makes a body's error a budget_exhausted result: the body
// ran out of a budget of its own (money, quota, tokens) part way.
func BudgetExhausted(err error) error {
	if err == nil {
		return nil
	}
	return &bodyError{err: err, status: schema.StatusBudgetExhausted}
}

// Transient reports whether err is a failure of the infrastructure that
// passes by itself (stream.Transient: a 503, a timeout, no responders, a
// reconnecting connection …). Such an error is retried, never turned into
// a refusal of a call.
func Transient(err error) bool { return stream.Transient(err) }
