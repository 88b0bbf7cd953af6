package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// DecodeReview decodes a review (jw.reviews.<session>, or the file given to
// `jingwei plan --review`) as strictly as DecodeEvent decodes an event:
// duplicate member names, invalid UTF-8, case-variant field names and
// missing fields make it invalid. Errors are *Error with code
// invalid_review, or field_too_long for an operator or evidence over
// MaxFieldBytes bytes. It does not verify the signature or trust the signer:
// recovery does. Safe for concurrent use.
func DecodeReview(b []byte) (Review, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Review{}, Errorf(CodeInvalidReview, "review is not valid: %s", describe(err))
		}
		return Review{}, Errorf(CodeInvalidReview, "review is not a JSON object")
	}
	var w wireReview
	if err := strictUnmarshal(b, &w); err != nil {
		return Review{}, Errorf(CodeInvalidReview, "review is not valid: %s", describe(err))
	}
	if err := checkCase("", w.Unknown, reviewFields); err != nil {
		return Review{}, Errorf(CodeInvalidReview, "review is not valid: %s", describe(err))
	}
	if w.Evidence == nil {
		return Review{}, Errorf(CodeInvalidReview, "review lacks evidence")
	}
	r := w.review()
	if err := r.Validate(); err != nil {
		return Review{}, err
	}
	return *r, nil
}

// Validate checks a review's fields as review.schema.json does: version 1,
// a valid session id, a call id, an operator that is not blank (white
// space only), a known verdict, an RFC 3339 at if set, and signer and sig together and well formed. Errors
// are *Error with code invalid_review, or field_too_long for a call id,
// operator or evidence over MaxFieldBytes bytes.
func (r *Review) Validate() error {
	return r.check("review", CodeInvalidReview)
}

// check validates a review; malformed fields get code bad (invalid_review
// for a review on its own, corrupt_history for one embedded in an event).
func (r *Review) check(what string, bad Code) error {
	err := r.checkFields(what)
	var e *Error
	if errors.As(err, &e) && e.Code == CodeCorruptHistory && bad != CodeCorruptHistory {
		return &Error{Code: bad, Message: e.Message}
	}
	return err
}

func (r *Review) checkFields(what string) error {
	if r.V != Version {
		return Errorf(CodeCorruptHistory, "%s has schema version %d, want %d", what, r.V, Version)
	}
	if !ValidSession(r.Session) {
		return Errorf(CodeCorruptHistory, "%s.session %s is not a valid session id", what, quoteShort([]byte(r.Session)))
	}
	if err := checkID(what+".call_id", r.CallID); err != nil {
		return err
	}
	if err := checkID(what+".operator", r.Operator); err != nil {
		return err
	}
	if strings.TrimSpace(r.Operator) == "" {
		// A review names the person who stands behind it: a blank name is
		// no name, refused alike by the checker, status and prepare.
		return Errorf(CodeCorruptHistory, "%s.operator is blank", what)
	}
	if err := checkLen(what+".evidence", r.Evidence); err != nil {
		return err
	}
	if r.Probe != "" {
		if err := checkID(what+".probe", r.Probe); err != nil {
			return err
		}
		if strings.TrimSpace(r.Probe) != r.Probe {
			return Errorf(CodeCorruptHistory, "%s.probe has surrounding white space", what)
		}
	}
	if !r.Verdict.Valid() {
		return Errorf(CodeCorruptHistory, "%s.verdict %s is not not_executed, completed or uncertain", what, quoteShort([]byte(r.Verdict)))
	}
	if r.At != "" {
		if _, err := time.Parse(time.RFC3339, r.At); err != nil {
			return Errorf(CodeCorruptHistory, "%s.at is not an RFC 3339 time", what)
		}
	}
	if (r.Signer == "") != (r.Sig == "") {
		return Errorf(CodeCorruptHistory, "%s has only one of signer and sig", what)
	}
	if r.Signer != "" && !validSigner(r.Signer) {
		return Errorf(CodeCorruptHistory, "%s.signer is not an nkey user public key", what)
	}
	if r.Sig != "" && !validBase64URL(r.Sig) {
		return Errorf(CodeCorruptHistory, "%s.sig is not base64url", what)
	}
	return nil
}

// DecodeRequest decodes a tool request (jw.requests.<session>, jw.api.call)
// strictly: duplicate member names anywhere (arguments included), invalid
// UTF-8, case-variant field names, a missing field or a number beyond
// Canonical's bounds make it invalid, and so does any field Validate
// refuses. Errors wrap ErrInvalidRequest; an over-long request id, tool or
// provider call id also matches ErrFieldTooLong. A request that decodes but
// breaks a field rule is returned with its error (a refusal can then be
// answered under its request id); any other error returns the zero
// Request. Safe for concurrent use.
func DecodeRequest(b []byte) (Request, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Request{}, fmt.Errorf("%w: %s", ErrInvalidRequest, describe(err))
		}
		return Request{}, fmt.Errorf("%w: not a JSON object", ErrInvalidRequest)
	}
	var w wireRequest
	if err := strictUnmarshal(b, &w); err != nil {
		return Request{}, fmt.Errorf("%w: %s", ErrInvalidRequest, describe(err))
	}
	if err := checkCase("", w.Unknown, requestFields); err != nil {
		return Request{}, fmt.Errorf("%w: %s", ErrInvalidRequest, describe(err))
	}
	r := Request{V: int(w.V), RequestID: w.RequestID, Session: w.Session, Task: w.Task, Tool: w.Tool,
		Arguments: json.RawMessage(w.Arguments), ProviderCallID: w.ProviderCallID}
	// A well-formed request that breaks a field rule is returned with the
	// error, so the refusal can be answered under its request id.
	return r, r.Validate()
}

// Validate checks a request's fields as request.schema.json does, so that
// a client in any language can check a request before publishing it:
// version 1; request_id 1 to MaxFieldBytes (1,024) bytes; session a valid
// session id (ValidSession: 1–128 bytes of [A-Za-z0-9_-]); task a valid
// task id (ValidTask: 1–128 bytes of [A-Za-z0-9_-], it is part of a KV
// key); tool 1 to 1,024 bytes; arguments present (JSON null is a value);
// provider_call_id at most 1,024 bytes (empty: none). Errors wrap
// ErrInvalidRequest and name the field; an over-long request_id, tool or
// provider_call_id also matches ErrFieldTooLong.
func (r *Request) Validate() error {
	tooLong := func(field, v string) error {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, Errorf(CodeFieldTooLong, "%s is %d bytes (limit %d)", field, len(v), MaxFieldBytes))
	}
	switch {
	case r.V != Version:
		return fmt.Errorf("%w: schema version %d, want %d", ErrInvalidRequest, r.V, Version)
	case r.RequestID == "":
		return fmt.Errorf("%w: request_id is missing", ErrInvalidRequest)
	case len(r.RequestID) > MaxFieldBytes:
		return tooLong("request_id", r.RequestID)
	case !ValidSession(r.Session):
		return fmt.Errorf("%w: session %s is not a valid session id (1-%d bytes of [A-Za-z0-9_-])", ErrInvalidRequest, quoteShort([]byte(r.Session)), MaxSessionBytes)
	case r.Task == "":
		return fmt.Errorf("%w: task is missing", ErrInvalidRequest)
	case !ValidTask(r.Task):
		return fmt.Errorf("%w: task %s is not a valid task id (1-%d bytes of [A-Za-z0-9_-])", ErrInvalidRequest, quoteShort([]byte(r.Task)), MaxTaskBytes)
	case r.Tool == "":
		return fmt.Errorf("%w: tool is missing", ErrInvalidRequest)
	case len(r.Tool) > MaxFieldBytes:
		return tooLong("tool", r.Tool)
	case len(r.Arguments) == 0:
		return fmt.Errorf("%w: arguments is missing", ErrInvalidRequest)
	case len(r.ProviderCallID) > MaxFieldBytes:
		return tooLong("provider_call_id", r.ProviderCallID)
	}
	return nil
}

// RequestEnvelope is what the tool.call that records a request adds to the
// request's own fields, at most: the event's envelope, a call id and an
// operation key, the tool's contract (a revision of up to MaxFieldBytes),
// a retry link with a signed plan and review, and the session log's
// message headers. Fits reserves it.
const RequestEnvelope = 8 << 10

// Fits reports whether the tool.call recording r can be appended to a
// session log whose messages may hold maxPayload bytes (the server's
// max_payload; 1 MiB by default): the arguments and ids plus
// RequestEnvelope must fit, and the arguments, nested two levels deeper in
// the event, must stay within the decoder's nesting limit. A request that
// passes Validate but not Fits could never be recorded: it is refused with
// a request_too_large *Error and must not be retried. maxPayload <= 0 checks
// the nesting only.
func (r *Request) Fits(maxPayload int) error {
	size := len(r.Arguments) + len(r.Tool) + len(r.RequestID) + len(r.ProviderCallID) + len(r.Task) + len(r.Session) + RequestEnvelope
	if maxPayload > 0 && size > maxPayload {
		return Errorf(CodeRequestTooLarge, "request %s: its tool.call would take about %d bytes, over the %d bytes a session log message may hold (arguments are %d bytes)", quoteShort([]byte(r.RequestID)), size, maxPayload, len(r.Arguments))
	}
	wrapped := make([]byte, 0, len(r.Arguments)+32)
	wrapped = append(wrapped, `{"call":{"arguments":`...)
	wrapped = append(wrapped, r.Arguments...)
	wrapped = append(wrapped, "}}"...)
	var v struct{}
	if err := Unmarshal(wrapped, &v); err != nil {
		return Errorf(CodeRequestTooLarge, "request %s: its arguments cannot be recorded in a tool.call: %v", quoteShort([]byte(r.RequestID)), err)
	}
	return nil
}
