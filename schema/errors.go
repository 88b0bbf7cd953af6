package schema

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Code is a stable error code: carried on the wire in the error body
// ({"error":{"code":…,"message":…}}, see ErrorBody), in the micro error
// headers, printed by the CLI, and matched by errors.Is through the
// sentinels below. Every code jingwei puts on the wire is declared here,
// once; a code names one meaning only.
type Code string

// Codes of a history and its recovery (inspect, prepare, reviews).
const (
	CodeUnknownCall     Code = "unknown_call"
	CodeSupersededCall  Code = "superseded_call"
	CodeLegacyCall      Code = "legacy_call"
	CodeCorruptHistory  Code = "corrupt_history"
	CodeHistoryTooLarge Code = "history_too_large"
	CodeFieldTooLong    Code = "field_too_long"
	CodeCompleted       Code = "completed"
	CodeNeedsReview     Code = "needs_review"
	CodeInvalidReview   Code = "invalid_review"
	// CodeReviewConflict: a review contradicts a trusted completed review
	// of the same call already on record (completed is final).
	CodeReviewConflict Code = "review_conflict"
	// CodeUnauthorizedRetry: a retry in the history carries no valid plan
	// signature by a trusted planner key (or its reviewed_not_executed
	// review does not verify): it was not authorized by jingwei.
	CodeUnauthorizedRetry Code = "unauthorized_retry"
)

// Codes of a tool request that cannot become a call: answered on
// jw.answers.<session> and by jw.api.call, nothing recorded.
const (
	// CodeUnknownTool: the request (or an in-process call) names a tool no
	// worker has registered.
	CodeUnknownTool Code = "unknown_tool"
	// CodeInvalidRequest: a tool request is malformed or breaks an id rule
	// (session, task, tool, request id).
	CodeInvalidRequest Code = "invalid_request"
	// CodeRequestTooLarge: a tool request would not fit the session log
	// once wrapped in its tool.call (payload size, nesting depth).
	CodeRequestTooLarge Code = "request_too_large"
)

// Codes of the canonical runtime (worker.Runtime): why a call was refused
// or did not complete. The body's own outcomes (failed, timeout,
// cancelled, budget_exhausted, output_limit) are the tool.result statuses
// of the same names.
const (
	// CodeInvalidCall: an in-process call itself is malformed (arguments
	// that are not JSON, a task that is not a token, a field over its
	// limit); nothing was recorded.
	CodeInvalidCall Code = "invalid_call"
	// CodePlanNotIssued: the retry plan was never issued in jw_plans.
	CodePlanNotIssued Code = "plan_not_issued"
	// CodePlanConsumed: the retry plan was already used by an attempt.
	CodePlanConsumed Code = "plan_consumed"
	// CodePlanUntrusted: the plan carries no signature that verifies
	// against the runtime's trusted planner keys: it was not issued by a
	// trusted recovery worker, or was altered since. A record in jw_plans
	// alone authorizes nothing.
	CodePlanUntrusted Code = "plan_untrusted"
	// CodePlanMismatch: the plan does not fit this call (Error.Field says
	// which of plan, session, task, tool, arguments, contract, key).
	CodePlanMismatch Code = "plan_mismatch"
	// CodeRejected: admission refused the call at Error.Stage; the body did
	// not run and tool.result{rejected} was recorded.
	CodeRejected Code = "rejected"
	// CodeFailed: the body returned an error (or panicked, or returned
	// output that is not JSON): result status failed.
	CodeFailed Code = Code(StatusFailed)
	// CodeTimeout: the body ran past the tool's timeout: result status
	// timeout. Not to be confused with CodeResultPending.
	CodeTimeout Code = Code(StatusTimeout)
	// CodeCancelled: the caller's context ended while the body ran.
	CodeCancelled Code = Code(StatusCancelled)
	// CodeBudgetExhausted: the body reported that it ran out of a budget
	// of its own part way.
	CodeBudgetExhausted Code = Code(StatusBudgetExhausted)
	// CodeOutputLimit: the body's output was over the tool's output limit
	// (and was not stored).
	CodeOutputLimit Code = Code(StatusOutputLimit)
	// CodeFenced: the session was taken over by a newer writer; the writer
	// never writes again.
	CodeFenced Code = "fenced"
	// CodeLog: the session log could not be written (not fenced); the call
	// may be left open, which recovery classifies.
	CodeLog Code = "log_unavailable"
)

// Codes of the `jingwei` service (jw.api.*) and its clients.
const (
	// CodeNotConfirmed: the call is still open while the session's lease is
	// live, so its history is not confirmed; prepare refuses rather than
	// fence a live writer.
	CodeNotConfirmed Code = "not_confirmed"
	// CodeBadRequest: a service request that is not the expected JSON, or
	// names an invalid session or an empty call id.
	CodeBadRequest Code = "bad_request"
	// CodeResultPending: jw.api.call saw no tool.result for its request in
	// time; the call may still run (ask again with the same request id, or
	// look at jingwei status). Before protocol 0.2 this was "timeout".
	CodeResultPending Code = "result_pending"
	// CodeNoAnswer: a client got no answer from the service within its own
	// timeout (the service is busy, or the call it asked for still runs).
	// Made by clients, never sent by the service.
	CodeNoAnswer Code = "no_answer"
	// CodeInvalidApproval: an approval that is malformed, unsigned, not
	// signed by a trusted approver, for another session, or for a call
	// that does not wait for approval (answered already, a replay, or
	// another call): refused, and nothing recorded.
	CodeInvalidApproval Code = "invalid_approval"
	// CodeApprovalPending: the call waits for approval (its
	// approval.requested has no answer on the log yet): inspect and prepare
	// refuse it until it is approved, denied or timed out.
	CodeApprovalPending Code = "approval_pending"
	// CodeTaskStopped: the call's task was stopped (task.stopped on the
	// log): no new call of the task is recorded and no plan is issued for
	// its calls.
	CodeTaskStopped Code = "task_stopped"
	// CodeRequestConflict: a request whose request_id is already bound to
	// another request of the session (another tool, task or arguments, or
	// another sender): refused, never answered with the other request's
	// result.
	CodeRequestConflict Code = "request_conflict"
	// CodeBusy: the service holds as many requests of this caller (or of
	// this session) as it takes at once; nothing was published or run.
	// Ask again later.
	CodeBusy Code = "busy"
	// CodeForbidden: the caller's credentials do not cover the session it
	// names (an agent scoped to other sessions): refused, nothing read or
	// published.
	CodeForbidden Code = "forbidden"
	// CodeStreamReplaced: a protected stream was deleted and re-created, or
	// otherwise lost history, since setup recorded its identity: recovery
	// and prepare refuse to act on it until an operator confirms.
	CodeStreamReplaced Code = "stream_replaced"
	// CodePermissionDenied: the caller's credentials may not publish or
	// subscribe on a subject the request needs (the NATS server's
	// permissions violation): the message names the subject and the role.
	// Nothing was published; asking again with the same credentials
	// changes nothing.
	CodePermissionDenied Code = "permission_denied"
	// CodeUnknownSession: the session has no event on its log (the CLI's
	// export and status of one session).
	CodeUnknownSession Code = "unknown_session"
	// CodeUnreachable: the client could not reach the NATS server (nothing
	// listens at the URL, or it did not answer the connection in time).
	CodeUnreachable Code = "unreachable"
	// CodeNotWaiting: an approval or denial for a call that does not wait
	// for approval (never asked, answered already, timed out): the CLI
	// publishes nothing.
	CodeNotWaiting Code = "not_waiting"
	// CodeInternal: anything else (the server unreachable, a failed write);
	// an error that is not an *Error travels with this code.
	CodeInternal Code = "internal"
)

// Error is jingwei's coded error: a stable Code plus what the caller may
// need to act on it. Two Errors match under errors.Is when their codes are
// equal, so the sentinels below work as match targets, and a group
// sentinel (ErrPlanRefused) matches every code of its group:
//
//	if errors.Is(err, schema.ErrCorruptHistory) { … }
//
// Err, when set, is the cause (e.g. stream.ErrPlanConsumed) and is
// reachable with errors.Is and errors.As too. The zero value is an error
// without a code; build Errors with Errorf or a literal.
type Error struct {
	Code    Code
	Message string
	// Latest names the latest call of the chain, for superseded_call.
	Latest string
	// Field names what a plan_mismatch is about.
	Field string
	// Stage is the admission stage of a rejected call.
	Stage Stage
	// CallID is the attempt's call id, when one was recorded.
	CallID string
	// Err is the underlying cause, if any.
	Err error

	// group lists the codes a group sentinel matches (NewGroup).
	group []Code
}

// Error returns "code: message", with " at <stage>" for a rejection and
// " (<field>)" for a mismatch after the code; the code alone when there is
// nothing more to say.
func (e *Error) Error() string {
	var b strings.Builder
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

// Text returns what the error says without its code (nor its stage and
// field, which travel in fields of their own): the message. It is what an
// error body carries as its message (see TextOf for a wrapped error).
func (e *Error) Text() string { return e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches an *Error with the same code, and a group sentinel whose
// group holds e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code || slices.Contains(t.group, e.Code)
}

// NewGroup returns a sentinel that matches, under errors.Is, an *Error with
// any of the codes (and one with the group's own code, which no error
// carries on the wire).
func NewGroup(code Code, codes ...Code) *Error {
	return &Error{Code: code, group: codes}
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TextOf returns what err says without the code of the first *Error in its
// chain: err.Error() with that error's "code: " (or "code ") taken out,
// and the context of the errors that wrap it kept. An error without an
// *Error is returned as err.Error(). This is the one place the code is
// stripped from a message.
func TextOf(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	s, inner := err.Error(), e.Error()
	i := strings.LastIndex(s, inner) // wrappers put their context first
	if i < 0 {
		return s
	}
	return s[:i] + e.Text() + s[i+len(inner):]
}

// Sentinels for errors.Is, one per code (see the Code constants for what
// each means).
var (
	ErrUnknownCall       = &Error{Code: CodeUnknownCall}
	ErrSupersededCall    = &Error{Code: CodeSupersededCall}
	ErrLegacyCall        = &Error{Code: CodeLegacyCall}
	ErrCorruptHistory    = &Error{Code: CodeCorruptHistory}
	ErrHistoryTooLarge   = &Error{Code: CodeHistoryTooLarge}
	ErrFieldTooLong      = &Error{Code: CodeFieldTooLong}
	ErrCompleted         = &Error{Code: CodeCompleted}
	ErrNeedsReview       = &Error{Code: CodeNeedsReview}
	ErrInvalidReview     = &Error{Code: CodeInvalidReview}
	ErrReviewConflict    = &Error{Code: CodeReviewConflict}
	ErrUnauthorizedRetry = &Error{Code: CodeUnauthorizedRetry}

	ErrUnknownTool     = &Error{Code: CodeUnknownTool}
	ErrRequestTooLarge = &Error{Code: CodeRequestTooLarge}

	ErrInvalidCall     = &Error{Code: CodeInvalidCall}
	ErrPlanNotIssued   = &Error{Code: CodePlanNotIssued}
	ErrPlanConsumed    = &Error{Code: CodePlanConsumed}
	ErrPlanMismatch    = &Error{Code: CodePlanMismatch}
	ErrPlanUntrusted   = &Error{Code: CodePlanUntrusted}
	ErrRejected        = &Error{Code: CodeRejected}
	ErrFailed          = &Error{Code: CodeFailed}
	ErrTimeout         = &Error{Code: CodeTimeout}
	ErrCancelled       = &Error{Code: CodeCancelled}
	ErrBudgetExhausted = &Error{Code: CodeBudgetExhausted}
	ErrOutputLimit     = &Error{Code: CodeOutputLimit}
	ErrFenced          = &Error{Code: CodeFenced}
	ErrLog             = &Error{Code: CodeLog}

	ErrNotConfirmed  = &Error{Code: CodeNotConfirmed}
	ErrBadRequest    = &Error{Code: CodeBadRequest}
	ErrResultPending = &Error{Code: CodeResultPending}
	ErrNoAnswer      = &Error{Code: CodeNoAnswer}
	ErrInternal      = &Error{Code: CodeInternal}

	ErrRequestConflict = &Error{Code: CodeRequestConflict}
	ErrBusy            = &Error{Code: CodeBusy}
	ErrForbidden       = &Error{Code: CodeForbidden}
	ErrStreamReplaced  = &Error{Code: CodeStreamReplaced}

	ErrInvalidApproval = &Error{Code: CodeInvalidApproval}
	ErrApprovalPending = &Error{Code: CodeApprovalPending}
	ErrTaskStopped     = &Error{Code: CodeTaskStopped}

	// ErrPlanRefused is a group: it matches plan_not_issued,
	// plan_consumed, plan_mismatch and plan_untrusted (a plan that was not
	// used; nothing recorded).
	ErrPlanRefused = NewGroup("plan_refused", CodePlanNotIssued, CodePlanConsumed, CodePlanMismatch, CodePlanUntrusted)
)

// ErrInvalidJSON is wrapped by the errors of Canonical and ArgsDigest: the
// input is not JSON jingwei accepts (malformed, invalid UTF-8, a duplicate
// member name, or a number out of bounds).
var ErrInvalidJSON = errors.New("schema: invalid JSON")

// ErrInvalidRequest is wrapped by the errors of DecodeRequest and
// Request.Validate: the tool request is malformed or lacks a field. (The
// wire code of such a request is CodeInvalidRequest.)
var ErrInvalidRequest = errors.New("schema: invalid tool request")

// ErrInvalidPlan is wrapped by the errors of DecodePlan and Plan.Validate:
// the retry plan is malformed or lacks a field.
var ErrInvalidPlan = errors.New("schema: invalid retry plan")

// ErrInvalidAssessment is wrapped by the errors of DecodeAssessment and
// Assessment.Validate: the assessment is malformed or lacks a field.
var ErrInvalidAssessment = errors.New("schema: invalid assessment")

// Errors of a contract's effect on the wire (wireEffect).
var (
	errNullEffect = errors.New("effect is null (omit it for unknown)")
	errEffectType = errors.New("effect is not a string")
)
