package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// This file is the one strict JSON reader every decoder of the package is
// built on: github.com/go-json-experiment/json (what becomes
// encoding/json/v2) with its default, strict options. The rules it applies
// to any input, whatever the message:
//
//   - RFC 8259 syntax, one value, optional surrounding whitespace (space,
//     tab, CR, LF) and nothing after it;
//   - strings (member names included) valid UTF-8, no lone surrogate
//     escape;
//   - no object with two members of the same name (compared after
//     unescaping), at any depth;
//   - nesting at most maxDepth deep;
//   - every number within Canonical's bounds (MaxNumberBytes,
//     MaxNumberExponent), so whatever a decoder accepts canonicalizes.
//
// Member names are matched case-sensitively; a message decoder then
// refuses a member whose name differs from one of its fields only in case
// (checkCase), because readers in other languages can be configured to
// bind it.

// maxDepth bounds nesting, as the v2 decoder does (and encoding/json).
const maxDepth = 10000

// reader is a pooled jsontext.Decoder reading from memory.
type reader struct {
	buf bytes.Buffer
	dec *jsontext.Decoder
}

var readerPool = sync.Pool{New: func() any {
	r := new(reader)
	r.dec = jsontext.NewDecoder(&r.buf)
	return r
}}

func getReader(b []byte) *reader {
	r := readerPool.Get().(*reader)
	r.buf = *bytes.NewBuffer(b)
	r.dec.Reset(&r.buf)
	return r
}

func putReader(r *reader) {
	r.buf = bytes.Buffer{}
	r.dec.Reset(&r.buf)
	readerPool.Put(r)
}

// strictUnmarshal decodes b, one JSON value, into v (a pointer) with the
// rules above. Errors are *syntaxError or *json.SemanticError (describe
// renders both).
func strictUnmarshal(b []byte, v any) error {
	r := getReader(b)
	defer putReader(r)
	if err := json.UnmarshalDecode(r.dec, v); err != nil {
		if err == io.EOF {
			return &syntaxError{offset: 0, msg: "unexpected end of input"}
		}
		return err
	}
	if err := checkEnd(r.dec, b); err != nil {
		return err
	}
	return checkNumbers(b)
}

// unmarshalDecode decodes the next value of dec into v, with the options
// dec was made with.
func unmarshalDecode(dec *jsontext.Decoder, v any) error { return json.UnmarshalDecode(dec, v) }

// checkEnd reports data after the value the decoder has read from b, at
// the offset of its first byte.
func checkEnd(dec *jsontext.Decoder, b []byte) error {
	off := int(dec.InputOffset())
	if _, err := dec.ReadToken(); err == io.EOF {
		return nil
	}
	for off < len(b) && (b[off] == ' ' || b[off] == '\t' || b[off] == '\r' || b[off] == '\n') {
		off++
	}
	return &syntaxError{offset: int64(off), msg: "data after the value"}
}

// caseError is a member name that differs from a field's only in case.
type caseError string

func (e caseError) Error() string { return string(e) }

// syntaxError is a violation of the lexical rules found outside the v2
// decoder (trailing data, number bounds).
type syntaxError struct {
	offset int64
	msg    string
}

func (e *syntaxError) Error() string {
	return "invalid JSON at byte " + strconv.FormatInt(e.offset, 10) + ": " + e.msg
}

// describe renders an error of strictUnmarshal (or of a jsontext.Decoder)
// for a message: "invalid JSON at byte N: …" for a lexical error, the
// semantic error (a value of the wrong type) without its "json: " prefix
// otherwise.
func describe(err error) string {
	var se *jsontext.SyntacticError
	var xe *syntaxError
	var me *json.SemanticError
	var ce caseError
	var fe *fieldError
	switch {
	case errors.As(err, &ce):
		return string(ce)
	case errors.As(err, &fe):
		return fe.Error()
	case errors.As(err, &xe):
		return xe.Error()
	case errors.As(err, &se):
		return "invalid JSON at byte " + strconv.FormatInt(se.ByteOffset, 10) + ": " + syntaxReason(se)
	case errors.As(err, &me):
		return semanticReason(me)
	case err == io.ErrUnexpectedEOF:
		return "invalid JSON at byte 0: unexpected end of input"
	}
	return err.Error()
}

// semanticReason renders a value of the wrong type: where it is (the JSON
// pointer as a dotted path), what it is, what was wanted.
func semanticReason(me *json.SemanticError) string {
	path := strings.ReplaceAll(strings.TrimPrefix(string(me.JSONPointer), "/"), "/", ".")
	if path == "" {
		path = "value"
	}
	var want string
	if t := me.GoType; t != nil {
		want = goKindName(t)
	}
	if me.Err != nil && (want == "" || me.GoType == reflect.TypeFor[wireEffect]()) {
		return path + ": " + me.Err.Error()
	}
	msg := path + ": "
	if me.JSONKind != 0 {
		msg += "JSON " + me.JSONKind.String()
		if len(me.JSONValue) > 0 && len(me.JSONValue) <= 64 {
			msg += " " + string(me.JSONValue)
		}
		msg += " is not "
	} else {
		msg += "want "
	}
	msg += want
	if me.Err != nil {
		msg += ": " + me.Err.Error()
	}
	return msg
}

// goKindName names what a wire type takes, for semanticReason.
func goKindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "an RFC 3339 time"
	case t == reflect.TypeFor[wireEffect]():
		return ""
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + t.String()
}

func syntaxReason(se *jsontext.SyntacticError) string {
	switch {
	case se.Err == io.ErrUnexpectedEOF:
		return "unexpected end of input"
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		return "duplicate member name " + quoteShort([]byte(se.JSONPointer.LastToken()))
	}
	msg := se.Err.Error()
	if msg == "exceeded max depth" {
		return "nesting deeper than " + strconv.Itoa(maxDepth)
	}
	return msg
}

// checkNumbers checks every number of b, valid JSON, against Canonical's
// bounds. A literal of at most MaxNumberBytes bytes without an exponent is
// always within them, so only those need a closer look.
func checkNumbers(b []byte) error {
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			i++
			for {
				j := bytes.IndexByte(b[i:], '"')
				if j < 0 {
					return nil // not reached for valid JSON
				}
				i += j + 1
				// The quote ends the string unless an odd number of
				// backslashes escapes it.
				n := 0
				for k := i - 2; k >= 0 && b[k] == '\\'; k-- {
					n++
				}
				if n%2 == 0 {
					break
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			start := i
			exp := false
			for i < len(b) {
				c := b[i]
				if c == 'e' || c == 'E' {
					exp = true
				} else if !(c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+') {
					break
				}
				i++
			}
			if err := checkNumber(b[start:i], exp); err != nil {
				return &syntaxError{offset: int64(start), msg: err.Error()}
			}
		default:
			i++
		}
	}
	return nil
}

// checkNumber checks one number literal against Canonical's bounds.
func checkNumber(tok []byte, exp bool) error {
	if len(tok) > MaxNumberBytes {
		return fmt.Errorf("number literal of %d bytes (limit %d)", len(tok), MaxNumberBytes)
	}
	if exp {
		if _, _, _, err := decimalParts(tok); err != nil {
			return fmt.Errorf("number beyond 10^±%d", MaxNumberExponent)
		}
	}
	return nil
}

// checkCase refuses a member of unknown (the members of an object that
// matched none of its fields, as a JSON object, or empty) whose name
// differs from one of known only in case.
func checkCase(what string, unknown jsontext.Value, known []string) error {
	if len(unknown) == 0 {
		return nil
	}
	r := getReader(unknown)
	defer putReader(r)
	dec := r.dec
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := caseVariant(strings.TrimSuffix(what, ": "), []byte(tok.String()), known); err != nil {
			return err
		}
		if err := dec.SkipValue(); err != nil {
			return err
		}
	}
	return nil
}

// Unmarshal decodes b, one JSON value, into v (a non-nil pointer) as
// github.com/go-json-experiment/json (encoding/json/v2) does with its
// default options, with the package's lexical rules: syntax, valid UTF-8
// without lone surrogate escapes, no duplicate member names at any depth,
// nesting at most 10,000 deep, numbers within Canonical's bounds, nothing
// after the value. Member names match struct fields case-sensitively;
// unknown members are ignored. It is meant for the bodies of service
// requests and replies, whose types have no decoder of their own here.
// Errors wrap ErrInvalidJSON. Safe for concurrent use.
func Unmarshal(b []byte, v any) error {
	if err := strictUnmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidJSON, describe(err))
	}
	return nil
}

// quoteShort quotes a name for an error message, truncated to 64 bytes.
func quoteShort(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "…"
	}
	return strconv.Quote(string(b))
}

// firstByte returns the first byte of b after JSON whitespace, or 0.
func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}
