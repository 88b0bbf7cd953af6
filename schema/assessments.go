package schema

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// An assessment message (jw.assessments.<session>, docs/protocol.md §5.4)
// carries one assessment, as a JSON object, or a batch of them: a JSON
// array of MinAssessmentBatch or more assessments of one session, in log
// order. A batch of one is always written as the object. The message's
// Jw-Assessment-Id header has one value per assessment, in the same order.

// MinAssessmentBatch is the fewest assessments a batch (the array form)
// holds: one assessment is written as an object.
const MinAssessmentBatch = 2

// DecodeAssessments decodes an assessment message: one assessment (a JSON
// object, decoded as DecodeAssessment decodes it) or a batch (a JSON array
// of MinAssessmentBatch or more assessments, each decoded as
// DecodeAssessment decodes one, all of one session), and returns its
// assessments in message order. The whole message is read with the
// package's strict reader first (a duplicate member name anywhere refuses
// it). An empty array, an array of one, an element that is not a valid
// assessment (named by its index) or an assessment of another session
// than the batch's first is an error wrapping ErrInvalidAssessment (and
// ErrFieldTooLong for an over-long field). It reads no count limit beyond
// the message's own size (the server's max_payload bounds it). Safe for
// concurrent use.
func DecodeAssessments(b []byte) ([]Assessment, error) {
	switch firstByte(b) {
	case '{':
		a, err := DecodeAssessment(b)
		if err != nil {
			return nil, err
		}
		return []Assessment{a}, nil
	case '[':
	default:
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
		}
		return nil, fmt.Errorf("%w: not a JSON object (one assessment) or array (a batch)", ErrInvalidAssessment)
	}
	var elems []jsontext.Value
	if err := strictUnmarshal(b, &elems); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
	}
	if len(elems) < MinAssessmentBatch {
		return nil, fmt.Errorf("%w: a batch of %d assessments; a batch holds at least %d (one assessment is written as an object)", ErrInvalidAssessment, len(elems), MinAssessmentBatch)
	}
	out := make([]Assessment, len(elems))
	for i, e := range elems {
		if firstByte(e) != '{' {
			return nil, &batchError{i: i, err: fmt.Errorf("%w: not a JSON object", ErrInvalidAssessment)}
		}
		a, err := DecodeAssessment(e)
		if err != nil {
			return nil, &batchError{i: i, err: err}
		}
		if i > 0 && a.Session != out[0].Session {
			return nil, &batchError{i: i, err: fmt.Errorf("%w: session %s is not the batch's %s (a batch holds one session's assessments)", ErrInvalidAssessment, quoteShort([]byte(a.Session)), quoteShort([]byte(out[0].Session)))}
		}
		out[i] = a
	}
	return out, nil
}

// batchError is the error of one element of an assessment batch: the
// element's error (which wraps ErrInvalidAssessment), named by its index.
type batchError struct {
	i   int
	err error
}

func (e *batchError) Error() string {
	prefix := ErrInvalidAssessment.Error() + ": "
	return prefix + "batch element " + strconv.Itoa(e.i) + ": " + strings.TrimPrefix(e.err.Error(), prefix)
}

func (e *batchError) Unwrap() error { return e.err }

// EncodeAssessments returns the assessment message of as (see
// AppendAssessments). Safe for concurrent use.
func EncodeAssessments(as []Assessment) ([]byte, error) { return AppendAssessments(nil, as) }

// AppendAssessments appends the assessment message of as to dst: one
// assessment as AppendAssessment writes it, two or more as a JSON array of
// them in the order given (no whitespace). It does not validate the
// assessments; it refuses an empty as, assessments of more than one
// session, and an effect out of range (see AppendAssessment), wrapping
// ErrInvalidAssessment or effect.ErrUnknownEffect, and then dst is
// returned as given.
func AppendAssessments(dst []byte, as []Assessment) ([]byte, error) {
	switch len(as) {
	case 0:
		return dst, fmt.Errorf("%w: no assessment to encode", ErrInvalidAssessment)
	case 1:
		return AppendAssessment(dst, &as[0])
	}
	b := append(dst, '[')
	for i := range as {
		if as[i].Session != as[0].Session {
			return dst, fmt.Errorf("%w: assessment %d is of session %s, the batch's is %s", ErrInvalidAssessment, i, quoteShort([]byte(as[i].Session)), quoteShort([]byte(as[0].Session)))
		}
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendAssessment(b, &as[i]); err != nil {
			return dst, err
		}
	}
	return append(b, ']'), nil
}

// ID returns a's identity, "a.<session>.<call_id>.<evidence>": the value
// of its Jw-Assessment-Id header (docs/protocol.md §5.4), the same for the
// same call outcome from any recovery worker, by which readers count call
// outcomes.
func (a *Assessment) ID() string {
	return "a." + a.Session + "." + a.CallID + "." + a.Evidence
}
