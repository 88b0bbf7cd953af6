package schema

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Bounds on a number in canonical JSON. They keep a hostile literal such as
// 1e999999999 from costing memory or time; no real tool argument comes near
// them.
const (
	// MaxNumberBytes is the longest number literal Canonical accepts.
	MaxNumberBytes = 4096
	// MaxNumberExponent bounds the decimal exponent of a number's value
	// (the e of d.ddd × 10^e, as the canonical form writes it).
	MaxNumberExponent = 10000
)

// Canonical returns the canonical form of a JSON value: RFC 8785 (JCS) —
// members sorted by their names' UTF-16 code units, strings escaped as RFC
// 8785 says (only '"', '\\' and control characters, with the short forms
// \b \f \n \r \t), no insignificant whitespace — with one strictness on
// top (docs/protocol.md §6): a number is never rounded. It reads and checks the input
// with the package's strict JSON reader (github.com/go-json-experiment/json's
// jsontext).
//
// RFC 8785 writes every number as the shortest decimal that round-trips its
// IEEE double, so 1234567890123456789 and 1234567890123456790 (one double)
// would canonicalize alike. Canonical writes every number as its exact
// decimal value instead, in the same ES6 layout RFC 8785 uses (plain digits
// up to 21 integer digits, "0.000001"-style down to 1e-6, else d.ddde±n).
// Whenever a literal's digits already are the shortest round-trip digits of
// its double — the common case, including every integer below 2^53 — the
// output is byte-identical to RFC 8785. Numerically equal literals (1.0, 1,
// 10e-1; -0 and 0) canonicalize alike; any two different values differ.
// Numbers beyond the double range (1e400) are accepted and kept exact.
//
// Errors wrap ErrInvalidJSON: malformed JSON, invalid UTF-8 or a lone
// surrogate escape, a duplicate member name at any depth, nesting deeper
// than 10,000, or a number literal over MaxNumberBytes bytes, whose value is
// beyond 10^±MaxNumberExponent, or whose exponent part alone is beyond
// ±(MaxNumberExponent+MaxNumberBytes) (0e99999, for instance). DecodeEvent
// and the package's other decoders apply the same checks to every input, so
// the arguments of a decoded call always canonicalize. Safe for concurrent
// use.
func Canonical(raw json.RawMessage) ([]byte, error) {
	c := canonPool.Get().(*canonicalizer)
	defer c.release()
	out, err := c.run(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidJSON, describe(err))
	}
	return out, nil
}

// ArgsDigest returns "sha256:" followed by the lowercase hex SHA-256 of
// Canonical(raw). Errors are those of Canonical. Safe for concurrent use.
func ArgsDigest(raw json.RawMessage) (string, error) {
	c, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalizer reads a value into a tree, sorting each object's members
// as it closes, then writes the tree once: every output byte is written
// exactly once, whatever the nesting (copying sorted subtrees up level by
// level would cost O(size × depth)).
type canonicalizer struct {
	text    []byte    // canonical text of scalars and member names
	nodes   []cnode   // the values
	kids    []int32   // array elements (node indices), contiguous per array
	members []cmember // object members, contiguous per object, sorted
	kstack  []int32   // elements of the arrays being read
	mstack  []cmember // members of the objects being read
	digits  []byte    // scratch for numbers
}

type cnode struct {
	kind   byte  // 0: scalar, '[': array, '{': object
	lo, hi int32 // scalar: text[lo:hi]; array: kids[lo:hi]; object: members[lo:hi]
}

type cmember struct {
	name   string // unescaped, for sorting
	lo, hi int32  // the canonical quoted name: text[lo:hi]
	val    int32  // node index
}

var canonPool = sync.Pool{New: func() any { return new(canonicalizer) }}

func (c *canonicalizer) release() {
	if cap(c.text) > 1<<20 || cap(c.nodes) > 1<<16 {
		return // do not keep huge buffers around
	}
	c.text, c.nodes, c.kids = c.text[:0], c.nodes[:0], c.kids[:0]
	clear(c.members)
	c.members = c.members[:0]
	clear(c.mstack)
	c.mstack, c.kstack = c.mstack[:0], c.kstack[:0]
	canonPool.Put(c)
}

func (c *canonicalizer) run(raw []byte) ([]byte, error) {
	r := getReader(raw)
	defer putReader(r)
	root, err := c.value(r.dec)
	if err != nil {
		if err == io.EOF {
			return nil, &syntaxError{msg: "unexpected end of input"}
		}
		return nil, err
	}
	if err := checkEnd(r.dec, raw); err != nil {
		return nil, err
	}
	return c.write(make([]byte, 0, len(c.text)+len(c.text)/4+2), root), nil
}

// value reads the next value and returns its node.
func (c *canonicalizer) value(dec *jsontext.Decoder) (int32, error) {
	switch dec.PeekKind() {
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return 0, err
		}
		base := len(c.mstack)
		for dec.PeekKind() != '}' {
			v, err := dec.ReadValue() // the name (PeekKind 0: the error is here)
			if err != nil {
				return 0, err
			}
			m := cmember{lo: int32(len(c.text))}
			if bytes.IndexByte(v, '\\') < 0 {
				m.name = string(v[1 : len(v)-1])
				c.text = append(c.text, v...)
			} else {
				c.digits, _ = jsontext.AppendUnquote(c.digits[:0], v)
				m.name = string(c.digits)
				c.text, _ = jsontext.AppendQuote(c.text, c.digits)
			}
			m.hi = int32(len(c.text))
			if m.val, err = c.value(dec); err != nil {
				return 0, err
			}
			c.mstack = append(c.mstack, m)
		}
		if _, err := dec.ReadToken(); err != nil {
			return 0, err
		}
		ms := c.mstack[base:]
		slices.SortFunc(ms, func(a, b cmember) int { return compareUTF16(a.name, b.name) })
		n := cnode{kind: '{', lo: int32(len(c.members))}
		c.members = append(c.members, ms...)
		n.hi = int32(len(c.members))
		clear(ms)
		c.mstack = c.mstack[:base]
		return c.node(n), nil
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return 0, err
		}
		base := len(c.kstack)
		for dec.PeekKind() != ']' {
			k, err := c.value(dec)
			if err != nil {
				return 0, err
			}
			c.kstack = append(c.kstack, k)
		}
		if _, err := dec.ReadToken(); err != nil {
			return 0, err
		}
		n := cnode{kind: '[', lo: int32(len(c.kids))}
		c.kids = append(c.kids, c.kstack[base:]...)
		n.hi = int32(len(c.kids))
		c.kstack = c.kstack[:base]
		return c.node(n), nil
	case '"':
		v, err := dec.ReadValue()
		if err != nil {
			return 0, err
		}
		n := cnode{lo: int32(len(c.text))}
		if bytes.IndexByte(v, '\\') < 0 {
			// Valid UTF-8 without escapes and control characters: already
			// canonical.
			c.text = append(c.text, v...)
		} else {
			c.digits, _ = jsontext.AppendUnquote(c.digits[:0], v)
			c.text, _ = jsontext.AppendQuote(c.text, c.digits)
		}
		n.hi = int32(len(c.text))
		return c.node(n), nil
	case '0':
		v, err := dec.ReadValue()
		if err != nil {
			return 0, err
		}
		n := cnode{lo: int32(len(c.text))}
		if c.text, err = c.appendNumber(c.text, v); err != nil {
			return 0, &syntaxError{offset: dec.InputOffset() - int64(len(v)), msg: err.Error()}
		}
		n.hi = int32(len(c.text))
		return c.node(n), nil
	case 't', 'f', 'n':
		v, err := dec.ReadValue()
		if err != nil {
			return 0, err
		}
		n := cnode{lo: int32(len(c.text))}
		c.text = append(c.text, v...)
		n.hi = int32(len(c.text))
		return c.node(n), nil
	}
	// PeekKind found no value: the decoder says why.
	_, err := dec.ReadToken()
	if err == nil {
		err = &syntaxError{offset: dec.InputOffset(), msg: "unexpected token"}
	}
	return 0, err
}

func (c *canonicalizer) node(n cnode) int32 {
	c.nodes = append(c.nodes, n)
	return int32(len(c.nodes) - 1)
}

func (c *canonicalizer) write(out []byte, i int32) []byte {
	n := c.nodes[i]
	switch n.kind {
	case '[':
		out = append(out, '[')
		for j, k := range c.kids[n.lo:n.hi] {
			if j > 0 {
				out = append(out, ',')
			}
			out = c.write(out, k)
		}
		return append(out, ']')
	case '{':
		out = append(out, '{')
		for j, m := range c.members[n.lo:n.hi] {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(out, c.text[m.lo:m.hi]...)
			out = append(out, ':')
			out = c.write(out, m.val)
		}
		return append(out, '}')
	}
	return append(out, c.text[n.lo:n.hi]...)
}

// compareUTF16 orders two strings by their UTF-16 code units, as RFC 8785
// sorts member names. UTF-8 byte order is code point order, which differs
// from UTF-16 order only between a supplementary character (a surrogate
// pair, 0xD800-0xDBFF first) and one of U+E000-U+FFFF.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if ra >= 0x10000 && rb >= 0x10000 {
		return cmp.Compare(ra, rb)
	}
	unit := func(r rune) rune {
		if r >= 0x10000 {
			return 0xD800 // any high surrogate: the other rune is not one
		}
		return r
	}
	return cmp.Compare(unit(ra), unit(rb))
}

// appendNumber appends the canonical form of a valid JSON number literal:
// its exact decimal value in ES6 layout (see Canonical).
func (c *canonicalizer) appendNumber(dst, tok []byte) ([]byte, error) {
	// An integer literal of at most 21 digits is its own canonical form
	// (JSON allows no leading zeros), bar -0.
	if len(tok) <= 22 {
		d := tok
		if d[0] == '-' {
			d = d[1:]
		}
		if len(d) > 0 && len(d) <= 21 && !bytes.ContainsFunc(d, func(r rune) bool { return r < '0' || r > '9' }) {
			if string(tok) == "-0" {
				return append(dst, '0'), nil
			}
			return append(dst, tok...), nil
		}
	}
	if len(tok) > MaxNumberBytes {
		return dst, fmt.Errorf("number literal of %d bytes (limit %d)", len(tok), MaxNumberBytes)
	}
	neg, digits, n, err := decimalParts(tok)
	if err != nil {
		return dst, err
	}
	if len(digits) == 0 {
		return append(dst, '0'), nil // RFC 8785 prints both 0 and -0 as "0"
	}
	return appendES6(dst, neg, digits, n), nil
}

// exactNumber returns the canonical form of a valid JSON number literal.
func exactNumber(tok []byte) (string, error) {
	var c canonicalizer
	b, err := c.appendNumber(nil, tok)
	return string(b), err
}

// decimalParts splits a valid JSON number into its sign, its significant
// digits (no leading or trailing zeros; empty for zero) and n, such that the
// value is 0.digits × 10^n.
func decimalParts(tok []byte) (neg bool, digits []byte, n int, err error) {
	i := 0
	if tok[0] == '-' {
		neg = true
		i++
	}
	digits = make([]byte, 0, len(tok))
	intLen := 0
	for ; i < len(tok) && tok[i] >= '0' && tok[i] <= '9'; i++ {
		digits = append(digits, tok[i])
		intLen++
	}
	if i < len(tok) && tok[i] == '.' {
		for i++; i < len(tok) && tok[i] >= '0' && tok[i] <= '9'; i++ {
			digits = append(digits, tok[i])
		}
	}
	exp := 0
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		eneg := false
		if tok[i] == '+' || tok[i] == '-' {
			eneg = tok[i] == '-'
			i++
		}
		for ; i < len(tok); i++ {
			exp = exp*10 + int(tok[i]-'0')
			if exp > MaxNumberExponent+MaxNumberBytes {
				return false, nil, 0, fmt.Errorf("number beyond 10^±%d", MaxNumberExponent)
			}
		}
		if eneg {
			exp = -exp
		}
	}
	n = intLen + exp
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	digits = digits[lead:]
	n -= lead
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	if len(digits) > 0 && (n-1 > MaxNumberExponent || n-1 < -MaxNumberExponent) {
		return false, nil, 0, fmt.Errorf("number beyond 10^±%d", MaxNumberExponent)
	}
	return neg, digits, n, nil
}

// appendES6 appends ±0.digits × 10^n the way ECMAScript's Number::toString
// lays out a number (the layout RFC 8785 uses), for any number of digits.
func appendES6(b []byte, neg bool, d []byte, n int) []byte {
	k := len(d)
	if neg {
		b = append(b, '-')
	}
	switch {
	case k <= n && n <= 21:
		b = append(b, d...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, d[:n]...)
		b = append(b, '.')
		b = append(b, d[n:]...)
	case -6 < n && n <= 0:
		b = append(b, "0."...)
		for range -n {
			b = append(b, '0')
		}
		b = append(b, d...)
	default:
		b = append(b, d[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, d[1:]...)
		}
		b = append(b, 'e')
		if e := n - 1; e < 0 {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(-e), 10)
		} else {
			b = append(b, '+')
			b = strconv.AppendInt(b, int64(e), 10)
		}
	}
	return b
}
