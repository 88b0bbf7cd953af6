package schema

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ErrorBody is the one wire form of an error answer: the body of every
// error answer of the `jingwei` service (jw.api.*) and what the CLI prints
// on stdout for a refusal, {"error":{"code":"…","message":"…"}}
// (errorbody.schema.json). Build it with NewErrorBody, read it with
// DecodeErrorBody.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error of an ErrorBody. Code and Message are always
// set; the other fields only where the code uses them (Latest for
// superseded_call, Stage for rejected, Field for plan_mismatch, CallID for
// an attempt that was recorded).
type ErrorDetail struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Latest  string `json:"latest,omitempty"`
	Stage   Stage  `json:"stage,omitempty"`
	Field   string `json:"field,omitempty"`
	CallID  string `json:"call_id,omitempty"`
}

// NewErrorBody returns the body of err: the code and fields of the first
// *Error in its chain and TextOf(err) as the message (the code is not
// repeated in it), or code internal and err.Error() for an error without
// an *Error. A nil err has no body: the zero ErrorBody.
func NewErrorBody(err error) ErrorBody {
	if err == nil {
		return ErrorBody{}
	}
	var e *Error
	if !errors.As(err, &e) {
		return ErrorBody{Error: ErrorDetail{Code: CodeInternal, Message: err.Error()}}
	}
	return ErrorBody{Error: ErrorDetail{Code: e.Code, Message: TextOf(err), Latest: e.Latest, Stage: e.Stage, Field: e.Field, CallID: e.CallID}}
}

// EncodeError returns the JSON of NewErrorBody(err).
func EncodeError(err error) []byte {
	b, _ := json.Marshal(NewErrorBody(err)) // strings only: cannot fail
	return b
}

// Err returns the detail as an *Error (nil for a body without a code).
func (b ErrorBody) Err() *Error {
	d := b.Error
	if d.Code == "" {
		return nil
	}
	return &Error{Code: d.Code, Message: d.Message, Latest: d.Latest, Stage: d.Stage, Field: d.Field, CallID: d.CallID}
}

// DecodeErrorBody reads an error body. It returns the error it carries, or
// nil and ok false when data is not an error body (an ordinary answer: a
// JSON value without a top-level "error" object with a code).
func DecodeErrorBody(data []byte) (e *Error, ok bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	var probe struct {
		Error *ErrorDetail `json:"error"`
	}
	if Unmarshal(data, &probe) != nil || probe.Error == nil || probe.Error.Code == "" {
		return nil, false
	}
	return ErrorBody{Error: *probe.Error}.Err(), true
}
