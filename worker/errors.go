package worker

import (
	"errors"
	"strings"

	"github.com/jingwei/jingwei/schema"
)

// Code is the stable reason a call was refused or did not complete, for
// callers and the wire ({"error":{"code":…}}).
type Code string

// Error codes of the runtime.
const (
	// CodeUnknownTool: no tool of that name is registered; nothing was
	// recorded.
	CodeUnknownTool Code = "unknown_tool"
	// CodeInvalidCall: the call itself is malformed (arguments that are not
	// JSON, a task that is not a token, a field over its limit); nothing was
	// recorded.
	CodeInvalidCall Code = "invalid_call"
	// CodePlanNotIssued: the retry plan was never issued in jw_plans.
	CodePlanNotIssued Code = "plan_not_issued"
	// CodePlanConsumed: the retry plan was already used by an attempt.
	CodePlanConsumed Code = "plan_consumed"
	// CodePlanUntrusted: the plan carries no signature that verifies
	// against the runtime's trusted planner keys (Config.TrustedPlanners):
	// it was not issued by a trusted recovery worker, or was altered since.
	// A record in jw_plans alone authorizes nothing.
	CodePlanUntrusted Code = "plan_untrusted"
	// CodePlanMismatch: the plan does not fit this call (Error.Field says
	// which of plan, session, task, tool, arguments, contract, key).
	CodePlanMismatch Code = "plan_mismatch"
	// CodeRejected: admission refused the call at Error.Stage; the body did
	// not run and tool.result{rejected} was recorded.
	CodeRejected Code = "rejected"
	// CodeFailed: the body returned an error (or panicked, or returned
	// output that is not JSON).
	CodeFailed Code = "failed"
	// CodeTimeout: the body ran past the tool's timeout.
	CodeTimeout Code = "timeout"
	// CodeCancelled: the caller's context ended while the body ran.
	CodeCancelled Code = "cancelled"
	// CodeBudgetExhausted: the body reported, with BudgetExhausted, that it
	// ran out of a budget of its own part way.
	CodeBudgetExhausted Code = "budget_exhausted"
	// CodeOutputLimit: the body's output was over the tool's output limit
	// (and was not stored).
	CodeOutputLimit Code = "output_limit"
	// CodeFenced: the session was taken over by a newer writer; this runtime
	// never writes again.
	CodeFenced Code = "fenced"
	// CodeLog: the session log could not be written (not fenced); the call
	// may be left open, which recovery classifies.
	CodeLog Code = "log_unavailable"
	// CodeHistoryTooLarge: the session log has no room left for what the
	// call would record (a retry's three events); nothing was recorded and
	// the plan was not used.
	CodeHistoryTooLarge Code = Code(schema.CodeHistoryTooLarge)
)

// Error is the runtime's error: a stable Code plus details. Two Errors match
// under errors.Is when their codes are equal, so the sentinels below work as
// targets; ErrPlanRefused matches every plan_* code. Err, when set, is the
// cause (e.g. stream.ErrPlanConsumed) and is reachable with errors.Is too.
type Error struct {
	Code    Code
	Message string
	// Field names what a plan_mismatch is about.
	Field string
	// Stage is the admission stage of a rejected call.
	Stage schema.Stage
	// CallID is the attempt's call id, when one was recorded.
	CallID string
	// Err is the underlying cause, if any.
	Err error
}

// Error returns "worker: code: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("worker: ")
	b.WriteString(string(e.Code))
	if e.Stage != "" {
		b.WriteString(" at " + string(e.Stage))
	}
	if e.Field != "" {
		b.WriteString(" (" + e.Field + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches an *Error with the same code; ErrPlanRefused matches any plan
// refusal.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t == ErrPlanRefused {
		return e.Code == CodePlanNotIssued || e.Code == CodePlanConsumed || e.Code == CodePlanMismatch || e.Code == CodePlanUntrusted
	}
	return t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Sentinels for errors.Is, one per code (see the Code constants for what
// each means).
var (
	// ErrUnknownTool matches unknown_tool.
	ErrUnknownTool = &Error{Code: CodeUnknownTool}
	// ErrInvalidCall matches invalid_call.
	ErrInvalidCall = &Error{Code: CodeInvalidCall}
	// ErrPlanNotIssued matches plan_not_issued.
	ErrPlanNotIssued = &Error{Code: CodePlanNotIssued}
	// ErrPlanConsumed matches plan_consumed.
	ErrPlanConsumed = &Error{Code: CodePlanConsumed}
	// ErrPlanMismatch matches plan_mismatch.
	ErrPlanMismatch = &Error{Code: CodePlanMismatch}
	// ErrPlanUntrusted matches plan_untrusted.
	ErrPlanUntrusted = &Error{Code: CodePlanUntrusted}
	// ErrRejected matches rejected, at any stage.
	ErrRejected = &Error{Code: CodeRejected}
	// ErrFailed matches failed.
	ErrFailed = &Error{Code: CodeFailed}
	// ErrTimeout matches timeout.
	ErrTimeout = &Error{Code: CodeTimeout}
	// ErrCancelled matches cancelled.
	ErrCancelled = &Error{Code: CodeCancelled}
	// ErrBudgetExhausted matches budget_exhausted.
	ErrBudgetExhausted = &Error{Code: CodeBudgetExhausted}
	// ErrOutputLimit matches output_limit.
	ErrOutputLimit = &Error{Code: CodeOutputLimit}
	// ErrFenced matches fenced.
	ErrFenced = &Error{Code: CodeFenced}
	// ErrLog matches log_unavailable.
	ErrLog = &Error{Code: CodeLog}
	// ErrPlanRefused matches plan_not_issued, plan_consumed, plan_mismatch
	// and plan_untrusted.
	ErrPlanRefused = &Error{Code: "plan_refused"}
)

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
