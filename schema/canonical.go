package schema

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/gowebpki/jcs"
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

// Canonical returns the canonical form of a JSON value: RFC 8785 (JCS),
// produced by github.com/gowebpki/jcs (members sorted by UTF-16 code units,
// strings escaped per RFC 8785, no insignificant whitespace), with one
// strictness on top (DESIGN §3): a number is never rounded.
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
// applies the same checks to every event, so the arguments of a decoded
// call always canonicalize. Safe for concurrent use.
func Canonical(raw json.RawMessage) ([]byte, error) {
	s := scannerPool.Get().(*scanner)
	defer scannerPool.Put(s)
	s.root, s.nums = kOpaque, true
	if err := s.scan(raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	// Numbers whose exact value is not what RFC 8785 would print are
	// replaced by unique placeholder strings before jcs.Transform, and the
	// placeholders by the exact layout afterwards. Placeholders are string
	// values, never member names, so they do not affect member order.
	type sub struct {
		span
		text string
	}
	var subs []sub
	for _, sp := range s.spans {
		tok := raw[sp.start:sp.end]
		text, exact, err := exactNumber(tok)
		if err != nil {
			return nil, err
		}
		if !exact {
			subs = append(subs, sub{sp, text})
		}
	}
	if len(subs) == 0 {
		out, err := jcs.Transform(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
		return out, nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		prefix := placeholderPrefix()
		if bytes.Contains(raw, prefix[1:]) {
			continue
		}
		in := make([]byte, 0, len(raw)+len(subs)*(len(prefix)+8))
		last := 0
		for i, sb := range subs {
			in = append(in, raw[last:sb.start]...)
			in = append(in, prefix...)
			in = strconv.AppendInt(in, int64(i), 10)
			in = append(in, '"')
			last = sb.end
		}
		in = append(in, raw[last:]...)
		out, err := jcs.Transform(in)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
		res := make([]byte, 0, len(out))
		found := 0
		for {
			j := bytes.Index(out, prefix)
			if j < 0 {
				break
			}
			res = append(res, out[:j]...)
			out = out[j+len(prefix):]
			k := bytes.IndexByte(out, '"')
			if k < 0 {
				break
			}
			n, err := strconv.Atoi(string(out[:k]))
			if err != nil || n < 0 || n >= len(subs) {
				break
			}
			res = append(res, subs[n].text...)
			out = out[k+1:]
			found++
		}
		if found != len(subs) {
			continue // a string collided with the placeholder: try another
		}
		return append(res, out...), nil
	}
	return nil, fmt.Errorf("%w: could not place number placeholders", ErrInvalidJSON)
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

var scannerPool = sync.Pool{New: func() any { return new(scanner) }}

// placeholderPrefix returns `"jw#<random hex>#`.
func placeholderPrefix() []byte {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	p := make([]byte, 0, 40)
	p = append(p, `"jw#`...)
	p = hex.AppendEncode(p, nonce[:])
	return append(p, '#')
}

// exactNumber returns the exact decimal value of a valid JSON number literal
// in ES6 layout, and whether that equals what RFC 8785 prints for it (the
// shortest round-trip form of its double).
func exactNumber(tok []byte) (text string, exact bool, err error) {
	if len(tok) > MaxNumberBytes {
		return "", false, fmt.Errorf("%w: number literal of %d bytes (limit %d)", ErrInvalidJSON, len(tok), MaxNumberBytes)
	}
	neg, digits, n, err := decimalParts(tok)
	if err != nil {
		return "", false, err
	}
	if len(digits) == 0 {
		return "0", true, nil // RFC 8785 prints both 0 and -0 as "0"
	}
	text = es6Layout(neg, digits, n)
	f, perr := strconv.ParseFloat(string(tok), 64)
	if perr != nil {
		return text, false, nil // beyond the double range
	}
	sd, sn := shortestDigits(f)
	return text, string(sd) == string(digits) && sn == n, nil
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
				return false, nil, 0, fmt.Errorf("%w: number exponent beyond ±%d", ErrInvalidJSON, MaxNumberExponent)
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
		return false, nil, 0, fmt.Errorf("%w: number exponent beyond ±%d", ErrInvalidJSON, MaxNumberExponent)
	}
	return neg, digits, n, nil
}

// shortestDigits returns the shortest round-trip digits of a finite, nonzero
// double's magnitude and n, such that |f| = 0.digits × 10^n.
func shortestDigits(f float64) ([]byte, int) {
	if f == 0 {
		return nil, 0
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	if b[0] == '-' {
		b = b[1:]
	}
	e := bytes.IndexByte(b, 'e')
	exp, _ := strconv.Atoi(string(b[e+1:]))
	digits := make([]byte, 0, e)
	for _, c := range b[:e] {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	return digits, exp + 1
}

// es6Layout writes ±0.digits × 10^n the way ECMAScript's Number::toString
// lays out a number (the layout RFC 8785 uses), for any number of digits.
func es6Layout(neg bool, d []byte, n int) string {
	k := len(d)
	var b []byte
	if neg {
		b = append(b, '-')
	}
	switch {
	case k <= n && n <= 21:
		b = append(b, d...)
		b = append(b, bytes.Repeat([]byte{'0'}, n-k)...)
	case 0 < n && n <= 21:
		b = append(b, d[:n]...)
		b = append(b, '.')
		b = append(b, d[n:]...)
	case -6 < n && n <= 0:
		b = append(b, "0."...)
		b = append(b, bytes.Repeat([]byte{'0'}, -n)...)
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
	return string(b)
}
