package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DecodeReview decodes a review (jw.reviews.<session>, or the file given to
// `jingwei plan --review`) as strictly as DecodeEvent decodes an event:
// duplicate member names, invalid UTF-8, case-variant field names and
// missing fields make it invalid. Errors are *Error with code
// invalid_review, or field_too_long for an operator or evidence over
// MaxFieldBytes bytes. It does not verify the signature or trust the signer:
// recovery does. Safe for concurrent use.
func DecodeReview(b []byte) (Review, error) {
	s := scannerPool.Get().(*scanner)
	defer scannerPool.Put(s)
	s.root, s.nums = kReview, false
	if err := s.scan(b); err != nil {
		return Review{}, Errorf(CodeInvalidReview, "review is not valid: %v", err)
	}
	if t := trimJSONSpace(b); t[0] != '{' {
		return Review{}, Errorf(CodeInvalidReview, "review is not a JSON object")
	}
	var r Review
	if err := json.Unmarshal(b, &r); err != nil {
		return Review{}, Errorf(CodeInvalidReview, "review is not valid: %v", err)
	}
	if s.present[kReview]&(1<<bitReviewEvidence) == 0 {
		return Review{}, Errorf(CodeInvalidReview, "review lacks evidence")
	}
	if err := r.Validate(); err != nil {
		return Review{}, err
	}
	return r, nil
}

// Validate checks a review's fields as review.schema.json does: version 1,
// a valid session id, a call id, a non-empty operator, a known verdict, an
// RFC 3339 at if set, and signer and sig together and well formed. Errors
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
	if err := checkLen(what+".evidence", r.Evidence); err != nil {
		return err
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
// Canonical's bounds make it invalid. Errors wrap ErrInvalidRequest; a
// request id over MaxFieldBytes bytes also matches ErrFieldTooLong. Safe for
// concurrent use.
func DecodeRequest(b []byte) (Request, error) {
	s := scannerPool.Get().(*scanner)
	defer scannerPool.Put(s)
	s.root, s.nums = kRequest, false
	if err := s.scan(b); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if t := trimJSONSpace(b); t[0] != '{' {
		return Request{}, fmt.Errorf("%w: not a JSON object", ErrInvalidRequest)
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Validate checks a request's fields as request.schema.json does: version
// 1, a request id of 1 to MaxFieldBytes bytes, a valid session id, a task, a
// tool and arguments. Errors wrap ErrInvalidRequest (and ErrFieldTooLong for
// an over-long request id).
func (r *Request) Validate() error {
	switch {
	case r.V != Version:
		return fmt.Errorf("%w: schema version %d, want %d", ErrInvalidRequest, r.V, Version)
	case r.RequestID == "":
		return fmt.Errorf("%w: request_id is missing", ErrInvalidRequest)
	case len(r.RequestID) > MaxFieldBytes:
		return fmt.Errorf("%w: %w", ErrInvalidRequest, Errorf(CodeFieldTooLong, "request_id is %d bytes (limit %d)", len(r.RequestID), MaxFieldBytes))
	case !ValidSession(r.Session):
		return fmt.Errorf("%w: session %s is not a valid session id", ErrInvalidRequest, quoteShort([]byte(r.Session)))
	case r.Task == "":
		return fmt.Errorf("%w: task is missing", ErrInvalidRequest)
	case r.Tool == "":
		return fmt.Errorf("%w: tool is missing", ErrInvalidRequest)
	case len(r.Arguments) == 0:
		return fmt.Errorf("%w: arguments is missing", ErrInvalidRequest)
	}
	return nil
}
