package schema

import (
	"errors"
	"fmt"
)

// Code is a stable error code carried on the wire and printed by the CLI
// ({"error":{"code":…,"message":…}}).
type Code string

// Error codes of DESIGN §2.
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
	// CodeUnknownTool: a tool request names a tool no worker has
	// registered; answered on jw.answers.<session>, nothing recorded.
	CodeUnknownTool Code = "unknown_tool"
	// CodeInvalidRequest: a tool request is malformed or breaks an id rule
	// (session, task, tool, request id); answered, nothing recorded.
	CodeInvalidRequest Code = "invalid_request"
	// CodeRequestTooLarge: a tool request would not fit the session log
	// once wrapped in its tool.call (payload size, nesting depth);
	// answered, nothing recorded.
	CodeRequestTooLarge Code = "request_too_large"
	// CodeReviewConflict: a review contradicts a trusted completed review
	// of the same call already on record (completed is final).
	CodeReviewConflict Code = "review_conflict"
	// CodeUnauthorizedRetry: a retry in the history carries no valid plan
	// signature by a trusted planner key (or its reviewed_not_executed
	// review does not verify): it was not authorized by jingwei.
	CodeUnauthorizedRetry Code = "unauthorized_retry"
)

// Error is an error with a stable Code. Two Errors match under errors.Is when
// their codes are equal, so the sentinels below work as match targets:
//
//	if errors.Is(err, schema.ErrCorruptHistory) { … }
type Error struct {
	Code    Code
	Message string
	// Latest names the latest call of the chain, for superseded_call.
	Latest string
}

// Error returns "code: message".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
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

// Sentinels for errors.Is, one per code.
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
)

// ErrInvalidJSON is wrapped by the errors of Canonical and ArgsDigest: the
// input is not JSON jingwei accepts (malformed, invalid UTF-8, a duplicate
// member name, or a number out of bounds).
var ErrInvalidJSON = errors.New("schema: invalid JSON")

// ErrInvalidRequest is wrapped by the errors of DecodeRequest and
// Request.Validate: the tool request is malformed or lacks a field.
var ErrInvalidRequest = errors.New("schema: invalid tool request")

// ErrInvalidPlan is wrapped by the errors of DecodePlan and Plan.Validate:
// the retry plan is malformed or lacks a field.
var ErrInvalidPlan = errors.New("schema: invalid retry plan")

// ErrInvalidAssessment is wrapped by the errors of DecodeAssessment and
// Assessment.Validate: the assessment is malformed or lacks a field.
var ErrInvalidAssessment = errors.New("schema: invalid assessment")
