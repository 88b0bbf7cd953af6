package schema

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/jingwei/jingwei/effect"
)

// DecodePlan decodes a retry plan (a jw.plans.<session> message, or the
// plan embedded in a jw_plans record: decode the record with Unmarshal,
// keeping its plan as a json.RawMessage, and that with DecodePlan) as
// strictly as DecodeEvent decodes an event: duplicate member names
// anywhere (arguments included), invalid UTF-8, a number beyond
// Canonical's bounds, case-variant field names, a required member missing
// (review may be null, not absent) and any field Validate refuses make it
// invalid. Errors wrap ErrInvalidPlan; an over-long key, call id or
// revision also matches ErrFieldTooLong, and an invalid embedded review
// carries the review's *Error. It checks neither the signature nor that
// args_digest is the digest of the arguments. Safe for concurrent use.
func DecodePlan(b []byte) (Plan, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Plan{}, fmt.Errorf("%w: %s", ErrInvalidPlan, describe(err))
		}
		return Plan{}, fmt.Errorf("%w: not a JSON object", ErrInvalidPlan)
	}
	var w wirePlan
	if err := strictUnmarshal(b, &w); err != nil {
		return Plan{}, fmt.Errorf("%w: %s", ErrInvalidPlan, describe(err))
	}
	if err := w.checkCase(); err != nil {
		return Plan{}, fmt.Errorf("%w: %s", ErrInvalidPlan, describe(err))
	}
	switch {
	case w.Contract == nil:
		return Plan{}, fmt.Errorf("%w: contract is missing", ErrInvalidPlan)
	case w.PriorSeq == nil:
		return Plan{}, fmt.Errorf("%w: prior_seq is missing", ErrInvalidPlan)
	case !w.Review.set:
		return Plan{}, fmt.Errorf("%w: review is missing (null for a plan without one)", ErrInvalidPlan)
	case w.Review.r != nil && w.Review.r.Evidence == nil:
		return Plan{}, fmt.Errorf("%w: review lacks evidence", ErrInvalidPlan)
	}
	p := Plan{V: w.V, PlanID: w.PlanID, Session: w.Session, Task: w.Task, Tool: w.Tool, Arguments: json.RawMessage(w.Arguments),
		ArgsDigest: w.ArgsDigest, Contract: w.Contract.contract(), Key: w.Key, PriorCallID: w.PriorCallID, PriorSeq: *w.PriorSeq,
		Basis: w.Basis, IssuedAt: w.IssuedAt, Signer: w.Signer, Sig: w.Sig}
	if w.Review.r != nil {
		p.Review = w.Review.r.review()
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

func (w *wirePlan) checkCase() error {
	if err := checkCase("", w.Unknown, planFields); err != nil {
		return err
	}
	if w.Contract != nil {
		if err := checkCase("contract: ", w.Contract.Unknown, contractFields); err != nil {
			return err
		}
	}
	if w.Review.r != nil {
		return checkCase("review: ", w.Review.r.Unknown, reviewFields)
	}
	return nil
}

// Validate checks a plan's fields as plan.schema.json does: version 1, a
// plan_id, a valid session id, a task, a tool, arguments, an args_digest
// of the form sha256:<64 hex digits>, a valid contract (revision 1 to
// MaxFieldBytes bytes), a key and prior_call_id of 1 to MaxFieldBytes
// bytes, a valid basis, a valid review when one is set and always for
// reviewed_not_executed, an issued_at, and signer and sig both or neither
// (signer an nkey user public key, sig unpadded base64url). Errors wrap
// ErrInvalidPlan (and ErrFieldTooLong for an over-long key, call id or
// revision; the review's *Error for a bad review).
func (p *Plan) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPlan, fmt.Sprintf(format, args...))
	}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		if e, ok := err.(*Error); ok && e.Code == CodeCorruptHistory {
			return bad("%s", e.Message)
		}
		return fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	switch {
	case p.V != Version:
		return bad("schema version %d, want %d", p.V, Version)
	case p.PlanID == "":
		return bad("plan_id is missing")
	case !ValidSession(p.Session):
		return bad("session %s is not a valid session id", quoteShort([]byte(p.Session)))
	case p.Task == "":
		return bad("task is missing")
	case p.Tool == "":
		return bad("tool is missing")
	case len(p.Arguments) == 0:
		return bad("arguments is missing")
	case !validDigest(p.ArgsDigest):
		return bad("args_digest %s is not sha256:<64 lowercase hex digits>", quoteShort([]byte(p.ArgsDigest)))
	}
	if err := wrap(checkContract("contract", p.Contract)); err != nil {
		return err
	}
	if err := wrap(checkID("key", p.Key)); err != nil {
		return err
	}
	if err := wrap(checkID("prior_call_id", p.PriorCallID)); err != nil {
		return err
	}
	switch p.Basis {
	case BasisNotStarted, BasisUncertainSafe:
	case BasisReviewedNotExecuted:
		if p.Review == nil {
			return bad("a reviewed_not_executed plan needs its review")
		}
	default:
		return bad("basis %s is not not_started, uncertain_safe or reviewed_not_executed", quoteShort([]byte(p.Basis)))
	}
	if p.Review != nil {
		if err := p.Review.check("review", CodeInvalidReview); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidPlan, err)
		}
	}
	if p.IssuedAt.IsZero() {
		return bad("issued_at is missing")
	}
	return wrap(checkSignature("plan", p.Signer, p.Sig))
}

// checkContract checks a contract on the wire: a known effect and a
// revision of 1 to MaxFieldBytes bytes.
func checkContract(what string, c effect.Contract) error {
	if !c.Effect.Valid() {
		return Errorf(CodeCorruptHistory, "%s.effect is invalid", what)
	}
	return checkID(what+".revision", c.Revision)
}

// validDigest matches ^sha256:[0-9a-f]{64}$.
func validDigest(s string) bool {
	const prefix = "sha256:"
	if len(s) != len(prefix)+64 || s[:len(prefix)] != prefix {
		return false
	}
	for _, c := range []byte(s[len(prefix):]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// DecodeAssessment decodes an assessment (jw.assessments.<session>, the
// output of `jingwei inspect --json`) as strictly as DecodeEvent decodes an
// event; see Assessment.Validate for the fields. Errors wrap
// ErrInvalidAssessment (and ErrFieldTooLong for an over-long call id, key or
// revision). Safe for concurrent use.
func DecodeAssessment(b []byte) (Assessment, error) {
	if firstByte(b) != '{' {
		if err := strictUnmarshal(b, new(jsontext.Value)); err != nil {
			return Assessment{}, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
		}
		return Assessment{}, fmt.Errorf("%w: not a JSON object", ErrInvalidAssessment)
	}
	var w wireAssessment
	if err := strictUnmarshal(b, &w); err != nil {
		return Assessment{}, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
	}
	if err := checkCase("", w.Unknown, assessmentFields); err != nil {
		return Assessment{}, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
	}
	if w.Contract != nil {
		if err := checkCase("contract: ", w.Contract.Unknown, contractFields); err != nil {
			return Assessment{}, fmt.Errorf("%w: %s", ErrInvalidAssessment, describe(err))
		}
	}
	if w.Contract == nil {
		return Assessment{}, fmt.Errorf("%w: contract is missing", ErrInvalidAssessment)
	}
	a := Assessment{Session: w.Session, CallID: w.CallID, Tool: w.Tool, Task: w.Task, Key: w.Key, Contract: w.Contract.contract(),
		Outcome: w.Outcome, Evidence: w.Evidence, Decision: w.Decision, Attempts: w.Attempts, Chain: w.Chain}
	if err := a.Validate(); err != nil {
		return Assessment{}, err
	}
	return a, nil
}

// Validate checks an assessment's fields as assessment.schema.json does: a
// valid session id, a call id, a tool, a task, a key, a valid contract, an
// outcome and a decision of docs/protocol.md §9, a non-empty evidence, attempts of at
// least 1 and a chain of at least one call id. Errors wrap
// ErrInvalidAssessment (and ErrFieldTooLong for an over-long call id, key
// or revision).
func (a *Assessment) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidAssessment, fmt.Sprintf(format, args...))
	}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		if e, ok := err.(*Error); ok && e.Code == CodeCorruptHistory {
			return bad("%s", e.Message)
		}
		return fmt.Errorf("%w: %w", ErrInvalidAssessment, err)
	}
	if !ValidSession(a.Session) {
		return bad("session %s is not a valid session id", quoteShort([]byte(a.Session)))
	}
	if err := wrap(checkID("call_id", a.CallID)); err != nil {
		return err
	}
	switch {
	case a.Tool == "":
		return bad("tool is missing")
	case a.Task == "":
		return bad("task is missing")
	}
	if err := wrap(checkID("key", a.Key)); err != nil {
		return err
	}
	if err := wrap(checkContract("contract", a.Contract)); err != nil {
		return err
	}
	switch {
	case a.Outcome != OutcomeCompleted && a.Outcome != OutcomeNotStarted && a.Outcome != OutcomeUncertain:
		return bad("outcome %s is not completed, not_started or uncertain", quoteShort([]byte(a.Outcome)))
	case a.Evidence == "":
		return bad("evidence is missing")
	case a.Decision != DecisionRefuse && a.Decision != DecisionRetryAllowed && a.Decision != DecisionNeedsReview:
		return bad("decision %s is not refuse, retry_allowed or needs_review", quoteShort([]byte(a.Decision)))
	case a.Attempts < 1:
		return bad("attempts is %d, want at least 1", a.Attempts)
	case len(a.Chain) == 0:
		return bad("chain is empty")
	}
	for i, id := range a.Chain {
		if err := wrap(checkID("chain["+strconv.Itoa(i)+"]", id)); err != nil {
			return err
		}
	}
	return nil
}

// EncodeAssessment returns the JSON of a, byte for byte what
// encoding/json's Marshal writes for it (see AppendAssessment). Safe for
// concurrent use.
func EncodeAssessment(a *Assessment) ([]byte, error) { return AppendAssessment(nil, a) }

// AppendAssessment appends the JSON of a to dst: byte for byte what
// encoding/json's Marshal writes for it (members in field order, HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 replaced by
// U+FFFD, a nil chain as null), without reflection. It does not validate
// a; the only error is an effect out of range (which Marshal refuses
// too), wrapping effect.ErrUnknownEffect, and then dst is returned as
// given.
func AppendAssessment(dst []byte, a *Assessment) ([]byte, error) {
	if !a.Contract.Effect.Valid() {
		return dst, fmt.Errorf("schema: assessment cannot be encoded: %w: %d", effect.ErrUnknownEffect, uint8(a.Contract.Effect))
	}
	b := append(dst, `{"session":`...)
	b = appendMarshalString(b, a.Session)
	b = append(b, `,"call_id":`...)
	b = appendMarshalString(b, a.CallID)
	b = append(b, `,"tool":`...)
	b = appendMarshalString(b, a.Tool)
	b = append(b, `,"task":`...)
	b = appendMarshalString(b, a.Task)
	b = append(b, `,"key":`...)
	b = appendMarshalString(b, a.Key)
	b = append(b, `,"contract":{"effect":`...)
	b = appendMarshalString(b, a.Contract.Effect.String())
	b = append(b, `,"revision":`...)
	b = appendMarshalString(b, a.Contract.Revision)
	b = append(b, `},"outcome":`...)
	b = appendMarshalString(b, string(a.Outcome))
	b = append(b, `,"evidence":`...)
	b = appendMarshalString(b, a.Evidence)
	b = append(b, `,"decision":`...)
	b = appendMarshalString(b, string(a.Decision))
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(a.Attempts), 10)
	b = append(b, `,"chain":`...)
	if a.Chain == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range a.Chain {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendMarshalString(b, c)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendMarshalString appends s as encoding/json's Marshal writes a
// string: \" \\ \b \f \n \r \t, other control characters and < > & as
// \u00XX, U+2028 and U+2029 as \u2028 and \u2029, each invalid UTF-8 byte
// as \ufffd.
func appendMarshalString(b []byte, s string) []byte {
	b, _ = appendQuoted(b, s, true, true)
	return b
}

// appendQuoted appends s as a JSON string the way encoding/json writes
// one: \" \\ \b \f \n \r \t, other control characters as \u00XX,
// U+2028 and U+2029 as \u2028 and \u2029; with html also < > & as
// \u00XX (Marshal; an Encoder with SetEscapeHTML(false) leaves them). An
// invalid UTF-8 byte is written as \ufffd with replace (what Marshal
// does); without it appendQuoted stops and returns false.
func appendQuoted(b []byte, s string, html, replace bool) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if !replace {
				return b, false
			}
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}
