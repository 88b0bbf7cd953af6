// The token-level reads of eventReader: one member's value of each JSON
// kind, with v2's default unmarshaling rules and the package's bounds;
// eventcodec.go maps members to the fields of each event body with them.

package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// fieldError is a member value of the wrong type (or out of range).
type fieldError struct {
	path string
	kind jsontext.Kind
	val  []byte // the JSON number or string, for the message; may be nil
	want string
	err  error
}

func (e *fieldError) Error() string {
	msg := e.path + ": "
	if e.want == "" {
		if e.err == nil {
			return msg + "invalid value"
		}
		return msg + e.err.Error()
	}
	if e.kind != 0 {
		msg += "JSON " + kindName(e.kind)
		if len(e.val) > 0 && len(e.val) <= 64 && (e.kind == '0' || e.kind == '"') {
			msg += " " + string(e.val)
		}
		msg += " is not "
	}
	msg += e.want
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return k.String()
}

// kindOf returns the kind of a valid JSON value.
func kindOf(v []byte) jsontext.Kind {
	switch c := v[0]; c {
	case '"', 'n', 't', 'f', '{', '[':
		return jsontext.Kind(c)
	}
	return '0'
}

// wrongValue is the error for v, a value of the wrong kind for path.
func wrongValue(path, want string, v []byte) error {
	return &fieldError{path: path, kind: kindOf(v), val: shortClone(v), want: want}
}

// shortClone copies v for an error message if it is short enough to be
// shown (it aliases a buffer that is reused).
func shortClone(v []byte) []byte {
	if len(v) > 64 {
		return nil
	}
	return bytes.Clone(v)
}

// wrong reads the value at the decoder (for its kind and text) and returns
// the error for it; a syntax error in the value comes first.
func (d *eventReader) wrong(path, want string, err error) error {
	v, rerr := d.dec.ReadValue()
	if rerr != nil {
		return rerr
	}
	return &fieldError{path: path, kind: kindOf(v), val: shortClone(v), want: want, err: err}
}

// str reads a string member (null: "").
func (d *eventReader) str(path string) (string, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return "", err
	}
	switch v[0] {
	case '"':
		return d.unquote(v), nil
	case 'n':
		return "", nil
	}
	return "", wrongValue(path, "a string", v)
}

// unquote returns the content of a valid JSON string.
func (d *eventReader) unquote(v []byte) string {
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1])
	}
	d.scratch, _ = jsontext.AppendUnquote(d.scratch[:0], v)
	return string(d.scratch)
}

// strBytes reads a string member and returns its content, which aliases
// the decoder's buffer or the scratch buffer until the next read (null:
// nil).
func (d *eventReader) strBytes(path string) ([]byte, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	switch v[0] {
	case '"':
		if bytes.IndexByte(v, '\\') < 0 {
			return v[1 : len(v)-1], nil
		}
		d.scratch, _ = jsontext.AppendUnquote(d.scratch[:0], v)
		return d.scratch, nil
	case 'n':
		return nil, nil
	}
	return nil, wrongValue(path, "a string", v)
}

// readEnum reads a string member whose value is mostly one of a wire
// enum's (a status, a stage): a declared value is returned from the table,
// without allocating; any other is copied, for Validate to refuse.
func readEnum[T ~string](d *eventReader, path string, table []T) (T, error) {
	s, err := d.strBytes(path)
	if err != nil {
		return "", err
	}
	for _, v := range table {
		if string(v) == string(s) {
			return v, nil
		}
	}
	return T(s), nil
}

// eventType reads the type member: a declared type comes with its row of
// the table, and its name from the table, without allocating.
func (d *eventReader) eventType() (string, *eventType, error) {
	s, err := d.strBytes("type")
	if err != nil {
		return "", nil, err
	}
	if t := eventTypeNamed(s); t != nil {
		return t.name, t, nil
	}
	return string(s), nil, nil
}

// uint reads a non-negative integer member; present is false for null.
func (d *eventReader) uint(path string) (n uint64, present bool, err error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return 0, false, err
	}
	switch kindOf(v) {
	case '0':
		// The string aliases the decoder's buffer only for the call: the
		// error keeps none of it (numErr).
		n, err := strconv.ParseUint(unsafe.String(&v[0], len(v)), 10, 64)
		if err != nil {
			return 0, false, &fieldError{path: path, kind: '0', val: shortClone(v), want: "a non-negative integer", err: numErr(err)}
		}
		return n, true, nil
	case 'n':
		return 0, false, nil
	}
	return 0, false, wrongValue(path, "a non-negative integer", v)
}

// int reads an integer member (null: 0).
func (d *eventReader) int(path string) (int, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return 0, err
	}
	switch kindOf(v) {
	case '0':
		n, err := strconv.ParseInt(unsafe.String(&v[0], len(v)), 10, 0)
		if err != nil {
			return 0, &fieldError{path: path, kind: '0', val: shortClone(v), want: "an integer", err: numErr(err)}
		}
		return int(n), nil
	case 'n':
		return 0, nil
	}
	return 0, wrongValue(path, "an integer", v)
}

// numErr is strconv's error without the repeated value.
func numErr(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}

// bool reads a boolean member (null: false).
func (d *eventReader) bool(path string) (bool, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return false, err
	}
	switch v[0] {
	case 't', 'f', 'n':
		return v[0] == 't', nil
	}
	return false, wrongValue(path, "a boolean", v)
}

// time reads an RFC 3339 time member (null: the zero time), as v2 does.
func (d *eventReader) time(path string) (time.Time, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return time.Time{}, err
	}
	switch v[0] {
	case '"':
		s := v[1 : len(v)-1]
		if bytes.IndexByte(v, '\\') >= 0 {
			d.scratch, _ = jsontext.AppendUnquote(d.scratch[:0], v)
			s = d.scratch
		}
		var t time.Time
		if err := parseTime(&t, s); err != nil {
			return time.Time{}, &fieldError{path: path, kind: '"', want: "an RFC 3339 time", err: err}
		}
		return t, nil
	case 'n':
		return time.Time{}, nil
	}
	return time.Time{}, wrongValue(path, "an RFC 3339 time", v)
}

// parseTime parses an RFC 3339 time as v2's default time unmarshaling
// does: time.Time.UnmarshalText, plus the checks RFC 3339's grammar
// requires and package time does not make (a two-digit hour, a period
// before the fraction, a time zone offset in range; go.dev/issue/57912).
func parseTime(t *time.Time, b []byte) error {
	if err := t.UnmarshalText(b); err != nil {
		return err
	}
	bad := func(what string) error {
		return &time.ParseError{Layout: time.RFC3339, Value: string(b), Message: ": " + what}
	}
	switch {
	case b[len("2006-01-02T")+1] == ':':
		return bad("hour must have two digits")
	case b[len("2006-01-02T15:04:05")] == ',':
		return bad("fraction must follow a period")
	case b[len(b)-1] != 'Z':
		if dec2(b[len(b)-len("07:00"):]) >= 24 {
			return bad("time zone hour out of range")
		}
		if dec2(b[len(b)-len("00"):]) >= 60 {
			return bad("time zone minute out of range")
		}
	}
	return nil
}

func dec2(b []byte) int { return int(b[0]-'0')*10 + int(b[1]-'0') }

// raw reads a member's value as is (arguments, output), checking its
// numbers against Canonical's bounds.
func (d *eventReader) raw() (json.RawMessage, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	if err := d.numbers(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.Clone(v)), nil
}

// numbers checks the numbers of v, a value just read, reporting the
// offset in the line.
func (d *eventReader) numbers(v []byte) error {
	if err := checkNumbers(v); err != nil {
		se := err.(*syntaxError)
		se.offset += d.dec.InputOffset() - int64(len(v))
		return se
	}
	return nil
}

// skip reads and drops a member's value (unknown members, the bodies of
// unknown event types), checking its numbers.
func (d *eventReader) skip() error {
	v, err := d.dec.ReadValue()
	if err != nil {
		return err
	}
	return d.numbers(v)
}

// unknown handles a member that matches no field of an object: a case
// variant of one is an error, anything else is skipped.
func (d *eventReader) unknown(path string, fields []string) error {
	if err := caseVariant(path, d.name, fields); err != nil {
		return err
	}
	return d.skip()
}

// caseVariant refuses name if it differs from one of fields only in case.
func caseVariant(path string, name []byte, fields []string) error {
	for _, f := range fields {
		if len(name) >= len(f) && len(name) <= 3*len(f) && string(name) != f && bytes.EqualFold(name, unsafe.Slice(unsafe.StringData(f), len(f))) {
			what := ""
			if path != "" {
				what = path + ": "
			}
			return caseError(what + "member name " + quoteShort(name) + " differs from " + strconv.Quote(f) + " only in case")
		}
	}
	return nil
}

// object starts reading an object member: false with a nil error for
// null.
func (d *eventReader) object(path string) (bool, error) {
	switch d.dec.PeekKind() {
	case '{':
		_, err := d.dec.ReadToken()
		return err == nil, err
	case 'n':
		_, err := d.dec.ReadValue()
		return false, err
	case 0:
		_, err := d.dec.ReadValue()
		return false, err
	}
	return false, d.wrong(path, "an object", nil)
}

// next reads the next member name into d.name, or the end of the object
// (false).
func (d *eventReader) next() (bool, error) {
	if d.dec.PeekKind() == '}' {
		_, err := d.dec.ReadToken()
		return false, err
	}
	v, err := d.dec.ReadValue()
	if err != nil {
		return false, err
	}
	if bytes.IndexByte(v, '\\') < 0 {
		d.name = v[1 : len(v)-1]
	} else {
		d.scratch, _ = jsontext.AppendUnquote(d.scratch[:0], v)
		d.name = d.scratch
	}
	return true, nil
}

// member advances to the next member of the object being read (its name
// in d.name) and reports whether there is one: false at the end of the
// object, and false with *err set when reading failed or when *err was
// already set (by the previous member's value). It is the loop of every
// object reader: for d.member(&err) { switch string(d.name) { … } }.
func (d *eventReader) member(err *error) bool {
	if *err != nil {
		return false
	}
	more, e := d.next()
	if e != nil {
		*err = e
	}
	return more && e == nil
}
