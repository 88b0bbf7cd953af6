package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// The session log's writers encode every event they append: Log.Append
// spends more on EncodeEvent than on anything else it adds to the raw
// publish. encodeEventReflect, the reference, encodes with
// encoding/json's reflection and then decodes its own output with
// DecodeEvent's reader, which proves DecodeEvent accepts it. appendEvent
// writes the same bytes field by field and proves the same thing without
// the second pass, by construction for what it writes itself and by
// DecodeEvent's own checks for the raw values it copies:
//
//   - the envelope and the bodies of tool.call, tool.started, tool.result
//     and session.fenced (and the envelope alone, for an event of an
//     unknown type), members in the struct order encoding/json uses,
//     omitempty and omitzero as the struct tags say;
//   - strings as encoding/json writes them without HTML escaping (", \,
//     \b, \f, \n, \r, \t short escapes, other control bytes \u00XX, U+2028
//     and U+2029 escaped, everything else as is); a string that is not
//     valid UTF-8 is left to the reference (encoding/json writes U+FFFD for
//     the bad bytes, so what DecodeEvent reads back differs in length, and
//     its field-length checks may decide differently);
//   - integers and booleans in their one JSON form;
//   - times in UTC with a year from 0 to 9999 as time.Time.MarshalJSON
//     writes them (RFC 3339 with nanoseconds); any other time is left to
//     the reference;
//   - arguments and output compacted as encoding/json compacts a
//     json.RawMessage, then read with DecodeEvent's own strict reader and
//     number check (syntax, UTF-8, duplicate names, numbers within
//     Canonical's bounds); a value nested too deep to be sure of the depth
//     limit inside an event is left to the reference.
//
// Whatever appendEvent cannot vouch for (the bodies without an append in
// the body table too: the approval and stop bodies), it leaves to the reference, so EncodeEvent returns exactly what it
// returned before, bytes and errors. TestEncodeEventMatchesReflect and
// FuzzEncodeEvent check that.

// appendEvent appends ev, already validated, to b. ok is false (and b is
// to be dropped) when the reference encoder must decide.
func appendEvent(b []byte, ev *Event) (_ []byte, ok bool) {
	return appendEventOf(b, ev, eventTypeOf(ev.Type))
}

// appendEventOf is appendEvent for an event of type typ (nil: unknown).
// Validate allows the type's body and no other, so that body is the only
// one to write.
func appendEventOf(b []byte, ev *Event, typ *eventType) (_ []byte, ok bool) {
	var payload *body
	if typ != nil {
		if payload = &bodies[typ.body]; payload.append == nil {
			return b, false
		}
	}
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(ev.V), 10)
	if ev.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, ev.Seq, 10)
	}
	b = append(b, `,"session":`...)
	if b, ok = appendString(b, ev.Session); !ok {
		return b, false
	}
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, ev.Epoch, 10)
	b = append(b, `,"at":`...)
	if b, ok = appendTime(b, ev.At); !ok {
		return b, false
	}
	b = append(b, `,"type":`...)
	if b, ok = appendString(b, ev.Type); !ok {
		return b, false
	}
	if payload != nil {
		b = append(b, `,"`...)
		b = append(b, payload.member...)
		b = append(b, `":`...)
		b, ok = payload.append(b, payload.get(ev))
	}
	return append(b, '}'), ok
}

func appendStarted(b []byte, s *Started) (_ []byte, ok bool) {
	b = append(b, `{"call_id":`...)
	b, ok = appendString(b, s.CallID)
	return append(b, '}'), ok
}

func appendFence(b []byte, f *Fence) (_ []byte, ok bool) {
	b = append(b, `{"epoch":`...)
	b = strconv.AppendUint(b, f.Epoch, 10)
	b = append(b, `,"owner":`...)
	b, ok = appendString(b, f.Owner)
	return append(b, '}'), ok
}

func appendCall(b []byte, c *Call) (_ []byte, ok bool) {
	b = append(b, `{"call_id":`...)
	if b, ok = appendString(b, c.CallID); !ok {
		return b, false
	}
	b = append(b, `,"tool":`...)
	if b, ok = appendString(b, c.Tool); !ok {
		return b, false
	}
	b = append(b, `,"arguments":`...)
	if b, ok = appendRaw(b, c.Arguments); !ok {
		return b, false
	}
	if c.RequestID != "" {
		b = append(b, `,"request_id":`...)
		if b, ok = appendString(b, c.RequestID); !ok {
			return b, false
		}
	}
	if c.ProviderCallID != "" {
		b = append(b, `,"provider_call_id":`...)
		if b, ok = appendString(b, c.ProviderCallID); !ok {
			return b, false
		}
	}
	b = append(b, `,"start_marker":`...)
	b = strconv.AppendBool(b, c.StartMarker)
	if c.Started {
		b = append(b, `,"started":true`...)
	}
	if op := c.Operation; op != nil {
		b = append(b, `,"operation":{"task":`...)
		if b, ok = appendString(b, op.Task); !ok {
			return b, false
		}
		b = append(b, `,"key":`...)
		if b, ok = appendString(b, op.Key); !ok {
			return b, false
		}
		// Validate checked the effect: MarshalText cannot fail.
		b = append(b, `,"contract":{"effect":"`...)
		b = append(b, op.Contract.Effect.String()...)
		b = append(b, `","revision":`...)
		if b, ok = appendString(b, op.Contract.Revision); !ok {
			return b, false
		}
		b = append(b, '}')
		if r := op.Retry; r != nil {
			b = append(b, `,"retry":`...)
			if b, ok = appendRetry(b, r); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

func appendRetry(b []byte, r *RetryLink) (_ []byte, ok bool) {
	b = append(b, `{"prior_call_id":`...)
	if b, ok = appendString(b, r.PriorCallID); !ok {
		return b, false
	}
	b = append(b, `,"prior_seq":`...)
	b = strconv.AppendUint(b, r.PriorSeq, 10)
	b = append(b, `,"plan_id":`...)
	if b, ok = appendString(b, r.PlanID); !ok {
		return b, false
	}
	b = append(b, `,"basis":`...)
	if b, ok = appendString(b, string(r.Basis)); !ok {
		return b, false
	}
	if rv := r.Review; rv != nil {
		b = append(b, `,"review":{"v":`...)
		b = strconv.AppendInt(b, int64(rv.V), 10)
		for _, m := range [...]struct {
			name, v string
			omit    bool
		}{
			{`,"session":`, rv.Session, false},
			{`,"call_id":`, rv.CallID, false},
			{`,"operator":`, rv.Operator, false},
			{`,"evidence":`, rv.Evidence, false},
			{`,"verdict":`, string(rv.Verdict), false},
			{`,"probe":`, rv.Probe, true},
			{`,"at":`, rv.At, true},
			{`,"signer":`, rv.Signer, true},
			{`,"sig":`, rv.Sig, true},
		} {
			if m.omit && m.v == "" {
				continue
			}
			b = append(b, m.name...)
			if b, ok = appendString(b, m.v); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	if !r.IssuedAt.IsZero() {
		b = append(b, `,"issued_at":`...)
		if b, ok = appendTime(b, r.IssuedAt); !ok {
			return b, false
		}
	}
	if r.Signer != "" {
		b = append(b, `,"signer":`...)
		if b, ok = appendString(b, r.Signer); !ok {
			return b, false
		}
	}
	if r.Sig != "" {
		b = append(b, `,"sig":`...)
		if b, ok = appendString(b, r.Sig); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendResult(b []byte, r *Result) (_ []byte, ok bool) {
	b = append(b, `{"call_id":`...)
	if b, ok = appendString(b, r.CallID); !ok {
		return b, false
	}
	b = append(b, `,"status":`...)
	if b, ok = appendString(b, string(r.Status)); !ok {
		return b, false
	}
	b = append(b, `,"retryable":`...)
	b = strconv.AppendBool(b, r.Retryable)
	if r.Stage != "" {
		b = append(b, `,"stage":`...)
		if b, ok = appendString(b, string(r.Stage)); !ok {
			return b, false
		}
	}
	if len(r.Output) > 0 {
		b = append(b, `,"output":`...)
		if b, ok = appendRaw(b, r.Output); !ok {
			return b, false
		}
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		if b, ok = appendString(b, r.Error); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendString appends s as encoding/json writes a string with HTML
// escaping off; false for a string that is not valid UTF-8.
func appendString(b []byte, s string) ([]byte, bool) {
	return appendQuoted(b, s, false, false)
}

// appendTime appends t as time.Time.MarshalJSON does, for a time in UTC
// with a four-digit year; false for any other.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if t.Location() != time.UTC {
		return b, false
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// appendRaw appends an arguments or output value compacted as
// encoding/json compacts a json.RawMessage, once DecodeEvent's reader has
// accepted the compacted value; false if it has not, or if the value may
// be too deep to nest in an event.
func appendRaw(b []byte, v json.RawMessage) ([]byte, bool) {
	if hasSpace(v) {
		var buf bytes.Buffer
		if json.Compact(&buf, v) != nil {
			return b, false
		}
		v = buf.Bytes()
	}
	if !rawAccepted(v) {
		return b, false
	}
	return append(b, v...), true
}

// rawAccepted reports whether DecodeEvent's reader accepts v as the value
// of an event's arguments or output: one strictly valid JSON value with
// numbers within Canonical's bounds, nested (two levels below the event
// object) within the reader's depth limit.
func rawAccepted(v []byte) bool {
	if simpleJSON(v) {
		return true
	}
	// Nesting d deep takes 2d bytes: a shorter value cannot come near the
	// limit; a longer one has its depth counted.
	if len(v) >= 2*(maxDepth-8) && rawDepth(v) > maxDepth-8 {
		return false
	}
	r := getReader(v)
	defer putReader(r)
	if _, err := r.dec.ReadValue(); err != nil {
		return false
	}
	if checkEnd(r.dec, v) != nil {
		return false
	}
	return checkNumbers(v) == nil
}

// rawDepth returns how deep the arrays and objects of v nest; v need not
// be valid.
func rawDepth(v []byte) int {
	depth, most := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			for i++; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			most = max(most, depth)
		case ']', '}':
			depth--
		}
	}
	return most
}

// hasSpace reports whether v holds a byte JSON counts as whitespace.
func hasSpace(v []byte) bool {
	for _, c := range v {
		if c <= ' ' && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			return true
		}
	}
	return false
}

// simpleJSON reports whether v is one JSON value of a kind so plain that
// DecodeEvent's reader accepts it for certain, which is what most
// arguments and outputs are: objects and arrays (at most 32 deep, objects
// of at most 32 members with distinct names), strings of printable ASCII
// without escapes, integers of at most MaxNumberBytes bytes, true, false,
// null, no whitespace. False says nothing: rawAccepted then asks the
// reader.
func simpleJSON(v []byte) bool {
	i, ok := simpleValue(v, 0, 0)
	return ok && i == len(v)
}

// simpleValue reads the simple value at v[i:] and returns the index after
// it.
func simpleValue(v []byte, i, depth int) (int, bool) {
	if i >= len(v) {
		return i, false
	}
	switch c := v[i]; {
	case c == '"':
		return simpleString(v, i)
	case c == '-' || c >= '0' && c <= '9':
		start := i
		if c == '-' {
			i++
		}
		switch {
		case i < len(v) && v[i] == '0':
			i++
		case i < len(v) && v[i] >= '1' && v[i] <= '9':
			for i++; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
			}
		default:
			return i, false
		}
		if i < len(v) && (v[i] == '.' || v[i] == 'e' || v[i] == 'E') {
			return i, false // fractions and exponents: the reader decides
		}
		return i, i-start <= MaxNumberBytes
	case c == 't':
		return i + 4, bytes.HasPrefix(v[i:], []byte("true"))
	case c == 'f':
		return i + 5, bytes.HasPrefix(v[i:], []byte("false"))
	case c == 'n':
		return i + 4, bytes.HasPrefix(v[i:], []byte("null"))
	case c == '[':
		if depth >= 32 {
			return i, false
		}
		i++
		if i < len(v) && v[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = simpleValue(v, i, depth+1); !ok || i >= len(v) {
				return i, false
			}
			switch v[i] {
			case ',':
				i++
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '{':
		if depth >= 32 {
			return i, false
		}
		i++
		if i < len(v) && v[i] == '}' {
			return i + 1, true
		}
		var names [32][]byte
		for n := 0; ; n++ {
			if n == len(names) {
				return i, false
			}
			start := i
			var ok bool
			if i, ok = simpleString(v, i); !ok {
				return i, false
			}
			name := v[start+1 : i-1]
			for _, prev := range names[:n] {
				if bytes.Equal(prev, name) {
					return i, false
				}
			}
			names[n] = name
			if i >= len(v) || v[i] != ':' {
				return i, false
			}
			if i, ok = simpleValue(v, i+1, depth+1); !ok || i >= len(v) {
				return i, false
			}
			switch v[i] {
			case ',':
				i++
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	}
	return i, false
}

// simpleString reads a string of printable ASCII without escapes at v[i:]
// (v[i] is a quote) and returns the index after its closing quote.
func simpleString(v []byte, i int) (int, bool) {
	if i >= len(v) || v[i] != '"' {
		return i, false
	}
	for i++; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return i, false
		}
	}
	return i, false
}
