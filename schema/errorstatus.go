package schema

import "strconv"

// statusOf is the numeric status of each code in a micro service's error
// header (Nats-Service-Error-Code), HTTP-like as the micro protocol asks:
// 400 the request is wrong, 403 the caller may not, 404 nothing by that
// name, 409 the state refuses it, 413 too large, 429 come back later, 500
// the server failed, 503 a dependency is unavailable, 504 no answer in
// time. The jingwei code itself travels in the error body and at the head
// of the description.
var statusOf = map[Code]int{
	CodeInvalidRequest: 400, CodeBadRequest: 400, CodeFieldTooLong: 400,
	CodeInvalidCall: 400, CodeInvalidReview: 400, CodeInvalidApproval: 400,
	CodeUnknownTool: 404, CodeUnknownCall: 404, CodeUnknownSession: 404,
	CodeForbidden: 403, CodePermissionDenied: 403, CodeUnauthorizedRetry: 403,
	CodePlanUntrusted: 403, CodeRejected: 403,
	CodeSupersededCall: 409, CodeLegacyCall: 409, CodeCompleted: 409,
	CodeNeedsReview: 409, CodeReviewConflict: 409, CodePlanNotIssued: 409,
	CodePlanConsumed: 409, CodePlanMismatch: 409, CodeFenced: 409,
	CodeNotConfirmed: 409, CodeResultPending: 409, CodeApprovalPending: 409,
	CodeTaskStopped: 409, CodeRequestConflict: 409, CodeStreamReplaced: 409,
	CodeCancelled: 409, CodeNotWaiting: 409,
	CodeHistoryTooLarge: 413, CodeRequestTooLarge: 413, CodeOutputLimit: 413,
	CodeBusy: 429, CodeBudgetExhausted: 429,
	CodeCorruptHistory: 500, CodeInternal: 500, CodeFailed: 500,
	CodeLog: 503, CodeUnreachable: 503,
	CodeTimeout: 504, CodeNoAnswer: 504,
}

// Status returns the numeric status of c for a micro error header: 400,
// 403, 404, 409, 413, 429, 500, 503 or 504 (docs/protocol.md §5.7); 500
// for a code it does not know.
func (c Code) Status() int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return 500
}

// StatusText returns Status as the decimal string the header carries.
func (c Code) StatusText() string { return strconv.Itoa(c.Status()) }
