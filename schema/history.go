package schema

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"iter"
	"strconv"
	"strings"
)

// History is a session history read one event at a time, in log order.
// Recovery consumes it in a single pass.
type History = iter.Seq2[Event, error]

// Events returns a History over events already in memory.
func Events(events []Event) History {
	return func(yield func(Event, error) bool) {
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// HistoryReader reads a history as JSON Lines (one event per line, seq
// included), enforcing Limits as it reads: it stops at the limit instead of
// loading the rest, and never buffers more than Limits.MaxBytes of input
// (plus one 64 KiB read), even for a single huge line. Blank lines are
// skipped but count toward the byte limit. Not safe for concurrent use.
type HistoryReader struct {
	br   *bufio.Reader
	lim  Limits
	n    int
	read int64
	line int
	buf  []byte
	err  error
}

// NewHistoryReader returns a reader over r with the given limits (zero
// fields mean the defaults).
func NewHistoryReader(r io.Reader, lim Limits) *HistoryReader {
	return &HistoryReader{br: bufio.NewReaderSize(r, 64<<10), lim: lim.WithDefaults()}
}

// Next returns the next event, or io.EOF after the last one. Errors are
// *Error with code corrupt_history, field_too_long or history_too_large and
// name the line (1-based, blank lines included) or the limit; an error of
// the underlying reader is returned as is. After an error, Next keeps
// returning it.
func (h *HistoryReader) Next() (Event, error) {
	if h.err != nil {
		return Event{}, h.err
	}
	for {
		line, err := h.readLine()
		if err != nil {
			h.err = err
			return Event{}, err
		}
		if len(trimJSONSpace(line)) == 0 {
			continue
		}
		// Decoded as read (without the newline), surrounding whitespace
		// included, so that byte offsets in errors count from the start
		// of the line.
		line = bytes.TrimSuffix(line, []byte("\n"))
		h.n++
		if h.n > h.lim.MaxEvents {
			h.err = Errorf(CodeHistoryTooLarge, "history has more than %d events (limit)", h.lim.MaxEvents)
			return Event{}, h.err
		}
		ev, err := decodeEvent(line)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				h.err = &Error{Code: e.Code, Message: "line " + strconv.Itoa(h.line) + ": " + e.Message}
			} else {
				h.err = Errorf(CodeCorruptHistory, "line %d: %v", h.line, err)
			}
			return Event{}, h.err
		}
		return ev, nil
	}
}

// All returns the remaining events as a History; iteration stops after the
// first error.
func (h *HistoryReader) All() History {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := h.Next()
			if err == io.EOF {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// readLine returns the next line. The slice is valid until the next call.
func (h *HistoryReader) readLine() ([]byte, error) {
	h.buf = h.buf[:0]
	for {
		chunk, err := h.br.ReadSlice('\n')
		h.read += int64(len(chunk))
		if h.read > h.lim.MaxBytes {
			return nil, Errorf(CodeHistoryTooLarge, "history is larger than %d bytes (limit)", h.lim.MaxBytes)
		}
		switch {
		case err == nil:
			h.line++
			if len(h.buf) == 0 {
				return chunk, nil // the whole line is in bufio's buffer
			}
			h.buf = append(h.buf, chunk...)
			return h.buf, nil
		case err == bufio.ErrBufferFull:
			h.buf = append(h.buf, chunk...)
		case err == io.EOF:
			h.buf = append(h.buf, chunk...)
			if len(h.buf) == 0 {
				return nil, io.EOF
			}
			h.line++
			return h.buf, nil
		default:
			return nil, err
		}
	}
}

// DecodeHistory reads a whole JSON Lines history into memory; see
// HistoryReader.
func DecodeHistory(r io.Reader, lim Limits) ([]Event, error) {
	h := NewHistoryReader(r, lim)
	var out []Event
	for {
		ev, err := h.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
}

// DecodeEvent decodes and validates one event (one JSON Lines row). A
// malformed event is a corrupt_history *Error: not a JSON object, invalid
// UTF-8 or a lone surrogate escape, a duplicate member name anywhere
// (arguments and output included), a number beyond Canonical's bounds, a
// member name that differs from a field's only in case, a required field
// missing or null, a value of the wrong type, or a body that does not match
// its type (see Validate). An over-long field is field_too_long. Unknown
// members are ignored; an event of an unknown type is kept with its
// envelope only (its bodies are nil, and the members named like them are not looked into beyond the rules every JSON input
// obeys). A contract without an effect decodes as effect.Unknown. Safe for
// concurrent use.
func DecodeEvent(b []byte) (Event, error) { return decodeEvent(b) }

func corruptEvent(err error) *Error {
	return Errorf(CodeCorruptHistory, "event is not valid: %s", describe(err))
}

// trimJSONSpace trims the whitespace JSON allows (space, tab, CR, LF),
// and nothing else: U+00A0 around an event is not whitespace.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// Validate checks an event's values against docs/protocol.md §5 and §14 (presence of
// members that have a valid zero value, such as epoch, is checked by
// DecodeEvent, which sees the JSON). It returns a corrupt_history *Error
// for a wrong version, an invalid session id, a missing at or type, a body
// missing, extra or incomplete for a known type (call: call_id, tool,
// arguments; operation: task, key, contract with a revision; retry:
// prior_call_id, plan_id, a valid basis, and if a review is embedded its
// version, session, call_id, operator, verdict and signer with sig; started:
// call_id; result: call_id, a valid status, a valid stage exactly when
// rejected), an epoch or fence.epoch above MaxEpoch, a retry's signer and
// sig not both set or both empty (signer an nkey user public key, sig
// unpadded base64url), and a field_too_long *Error for an operation key,
// call id, request id, contract revision, review operator or evidence over
// MaxFieldBytes bytes, and a call with both started and start_marker true
// (corrupt_history); the approval and stop bodies are checked as
// approval.go says. An event of an unknown type must carry none of the
// bodies (DecodeEvent drops them); its envelope is checked as usual. The
// types and their bodies are the table of eventtypes.go.
func (e *Event) Validate() error {
	_, err := e.validate()
	return err
}

// validate is Validate, returning the row of the event's type as well
// (nil for an unknown type).
func (e *Event) validate() (*eventType, error) {
	if e.V != Version {
		return nil, Errorf(CodeCorruptHistory, "event has schema version %d, want %d", e.V, Version)
	}
	if e.Epoch > MaxEpoch {
		return nil, Errorf(CodeCorruptHistory, "event epoch %d is above %d (2^53-1, schema.MaxEpoch)", e.Epoch, uint64(MaxEpoch))
	}
	if !ValidSession(e.Session) {
		return nil, Errorf(CodeCorruptHistory, "event has session %s, want 1-%d bytes of [A-Za-z0-9_-]", quoteShort([]byte(e.Session)), MaxSessionBytes)
	}
	if e.At.IsZero() {
		return nil, Errorf(CodeCorruptHistory, "event lacks at")
	}
	if e.Type == "" {
		return nil, Errorf(CodeCorruptHistory, "event lacks type")
	}
	n := e.bodyCount()
	t := eventTypeOf(e.Type)
	if t == nil {
		if n != 0 {
			return nil, Errorf(CodeCorruptHistory, "event of type %s carries a body of a known type", quoteShort([]byte(e.Type)))
		}
		return nil, nil
	}
	b := &bodies[t.body]
	p := b.get(e)
	if p == nil || n != 1 {
		return t, Errorf(CodeCorruptHistory, "%s must carry %s %s body and no other", t.name, article(b.member), b.member)
	}
	if t.check != nil {
		if err := t.check(p, e.Session); err != nil {
			return t, err
		}
	}
	return t, nil
}

// checkFence checks a session.fenced body.
func checkFence(f *Fence, _ string) error {
	if f.Epoch > MaxEpoch {
		return Errorf(CodeCorruptHistory, "fence.epoch %d is above %d (2^53-1, schema.MaxEpoch)", f.Epoch, uint64(MaxEpoch))
	}
	return nil
}

// checkID checks a required identifier: non-empty, at most MaxFieldBytes.
func checkID(what, v string) error {
	if v == "" {
		return Errorf(CodeCorruptHistory, "%s is missing", what)
	}
	return checkLen(what, v)
}

func checkLen(what, v string) error {
	if len(v) > MaxFieldBytes {
		return Errorf(CodeFieldTooLong, "%s is %d bytes (limit %d)", what, len(v), MaxFieldBytes)
	}
	return nil
}

func (c *Call) validate() error {
	if err := checkID("call.call_id", c.CallID); err != nil {
		return err
	}
	if c.Tool == "" {
		return Errorf(CodeCorruptHistory, "call.tool is missing")
	}
	if len(c.Arguments) == 0 {
		return Errorf(CodeCorruptHistory, "call.arguments is missing")
	}
	if err := checkLen("call.request_id", c.RequestID); err != nil {
		return err
	}
	if c.Started && c.StartMarker {
		// started: the body may run once this event is on the log;
		// start_marker: the body waits for a tool.started. Both cannot hold.
		return Errorf(CodeCorruptHistory, "call.started and call.start_marker are both true: a call recorded as started (combined form) has no start marker")
	}
	op := c.Operation
	if op == nil {
		return nil // legacy format: recovery refuses it with legacy_call
	}
	if op.Task == "" {
		return Errorf(CodeCorruptHistory, "operation.task is missing")
	}
	if err := checkID("operation.key", op.Key); err != nil {
		return err
	}
	if !op.Contract.Effect.Valid() {
		return Errorf(CodeCorruptHistory, "operation.contract.effect is invalid")
	}
	if err := checkID("operation.contract.revision", op.Contract.Revision); err != nil {
		return err
	}
	r := op.Retry
	if r == nil {
		return nil
	}
	if err := checkID("operation.retry.prior_call_id", r.PriorCallID); err != nil {
		return err
	}
	if r.PlanID == "" {
		return Errorf(CodeCorruptHistory, "operation.retry.plan_id is missing")
	}
	switch r.Basis {
	case BasisNotStarted, BasisUncertainSafe, BasisReviewedNotExecuted:
	default:
		return Errorf(CodeCorruptHistory, "operation.retry.basis %s is not not_started, uncertain_safe or reviewed_not_executed", quoteShort([]byte(r.Basis)))
	}
	if err := checkSignature("operation.retry", r.Signer, r.Sig); err != nil {
		return err
	}
	if rv := r.Review; rv != nil {
		if err := rv.check("operation.retry.review", CodeCorruptHistory); err != nil {
			return err
		}
	}
	return nil
}

// checkSignature checks the signer and sig of a plan or a retry link: both
// or neither, signer an nkey user public key, sig unpadded base64url.
func checkSignature(what, signer, sig string) error {
	if (signer == "") != (sig == "") {
		return Errorf(CodeCorruptHistory, "%s has only one of signer and sig", what)
	}
	if signer != "" && !validSigner(signer) {
		return Errorf(CodeCorruptHistory, "%s.signer is not an nkey user public key", what)
	}
	if sig != "" && !validRawBase64URL(sig) {
		return Errorf(CodeCorruptHistory, "%s.sig is not unpadded base64url", what)
	}
	return nil
}

// validRawBase64URL matches ^[A-Za-z0-9_-]+$.
func validRawBase64URL(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	})
}

// validSigner reports whether s looks like an nkey user public key:
// "U" and 55 base32 characters (the schema's ^U[A-Z2-7]{55}$).
func validSigner(s string) bool {
	if len(s) != 56 || s[0] != 'U' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// validBase64URL matches the schema's ^[A-Za-z0-9_-]+={0,2}$.
func validBase64URL(s string) bool {
	t := s
	for n := 0; n < 2 && len(t) > 0 && t[len(t)-1] == '='; n++ {
		t = t[:len(t)-1]
	}
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (r *Result) validate() error {
	if err := checkID("result.call_id", r.CallID); err != nil {
		return err
	}
	if !r.Status.Valid() {
		return Errorf(CodeCorruptHistory, "result.status %s is not a valid status", quoteShort([]byte(r.Status)))
	}
	switch {
	case r.Status == StatusRejected && !r.Stage.Valid():
		return Errorf(CodeCorruptHistory, "rejected result has stage %s, want %s", quoteShort([]byte(r.Stage)), orList(stages))
	case r.Status != StatusRejected && r.Stage != "":
		return Errorf(CodeCorruptHistory, "result with status %s has a stage (only rejected results do)", r.Status)
	}
	return nil
}
