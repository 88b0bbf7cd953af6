package schema

import (
	"bytes"
	"errors"
	"io"
	"math/big"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// A JSON number is a value, not a spelling: 1, 1.0 and 1e0 are one number,
// and JSON Schema's "integer" and "const": 1 accept all three. Where a
// message field is an integer (v, from_seq, max_events), jingwei accepts
// every spelling of an integral value, as the schemas do, and refuses a
// fractional one (1.5), as the schemas do.

// wholeNumber is an int that decodes from any spelling of an integral
// JSON number (1, 1.0, 1e0, 10E-1·10).
type wholeNumber int

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (w *wholeNumber) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '0' {
		return errors.New("not a number")
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	n, ok := integral(tok.String())
	if !ok || !n.IsInt64() || n.Int64() != int64(int(n.Int64())) {
		return errors.New("not an integer: " + tok.String())
	}
	*w = wholeNumber(n.Int64())
	return nil
}

// integral returns the value of the JSON number literal lit when it is a
// whole number, whatever its spelling.
func integral(lit string) (*big.Int, bool) {
	r, ok := new(big.Rat).SetString(lit)
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}

// WholeNumbers returns b, one JSON object, with every member value that is
// a number written with a fraction or an exponent but whose value is whole
// (1.0, 2e3) rewritten as the plain integer (1, 2000), at the top level
// only; other values, and b when it is not an object or not valid JSON,
// are left as they are (Unmarshal then reports what is wrong). Service
// request bodies go through it before they are decoded into their Go
// types, whose integer fields would refuse 1.0 where the body's schema
// accepts it. Safe for concurrent use.
func WholeNumbers(b []byte) []byte {
	if firstByte(b) != '{' || !bytes.ContainsAny(b, ".eE") {
		return b
	}
	r := getReader(b)
	defer putReader(r)
	dec := r.dec
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out)
	changed := false
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			if changed && errors.Is(err, io.EOF) {
				return bytes.TrimSpace(out.Bytes())
			}
			return b
		}
		if tok.Kind() == '0' && dec.StackDepth() == 1 {
			if lit := tok.String(); strings.ContainsAny(lit, ".eE") {
				if n, ok := integral(lit); ok && n.IsInt64() {
					tok, changed = jsontext.Int(n.Int64()), true
				} else if ok && n.IsUint64() {
					tok, changed = jsontext.Uint(n.Uint64()), true
				}
			}
		}
		if err := enc.WriteToken(tok); err != nil {
			return b
		}
	}
}
