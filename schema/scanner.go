package schema

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a single-pass, non-recursive JSON checker. It validates the
// syntax of RFC 8259, that strings are valid UTF-8 without lone surrogate
// escapes, and that no object has two members with the same (decoded) name,
// at any depth. It does not build values.
//
// With a root kind (kEnvelope for an event, kRequest, kReview) it also knows
// where the message's own objects are (envelope, call, operation, …): it
// records which of their members are
// present and non-null, and rejects a member name that differs from a known
// one only in case, because encoding/json would silently bind it to that
// field where other languages see an unknown member.
//
// In canonical mode (nums) it records the span of every number token.
//
// A scanner is reused across calls; it is not safe for concurrent use.
type scanner struct {
	b    []byte
	pos  int
	root objKind // kind of the top-level object; kOpaque: no field checks
	nums bool

	present [nKinds]uint32
	stack   []frame
	keys    [][]byte
	spans   []span

	// pendBit/pendKind name the known member whose value is being read, so
	// a null value can clear its presence bit.
	pendBit  int
	pendKind objKind
}

type span struct{ start, end int }

type frame struct {
	obj      bool
	kind     objKind
	keyStart int
	set      map[string]struct{}
}

// maxDepth bounds nesting, as encoding/json and the jcs library do.
const maxDepth = 10000

// dupSetThreshold is the number of members above which an object's names
// are kept in a map instead of being compared linearly.
const dupSetThreshold = 16

// objKind names the objects of an event whose members Go binds to struct
// fields.
type objKind uint8

const (
	kOpaque objKind = iota // arguments, output, unknown members: not bound
	kEnvelope
	kCall
	kStarted
	kResult
	kFence
	kOperation
	kContract
	kRetry
	kReview
	kRequest
	nKinds
)

// Presence bits checked by DecodeEvent.
const (
	bitEnvelopeEpoch  = 3
	bitContractEffect = 0
	bitFenceEpoch     = 0
	bitReviewEvidence = 4
)

var kindFields = [nKinds][]string{
	kEnvelope:  {"v", "seq", "session", "epoch", "at", "type", "call", "started", "result", "fence"},
	kCall:      {"call_id", "tool", "arguments", "request_id", "provider_call_id", "start_marker", "operation"},
	kStarted:   {"call_id"},
	kResult:    {"call_id", "status", "stage", "retryable", "output", "error"},
	kFence:     {"epoch", "owner"},
	kOperation: {"task", "key", "contract", "retry"},
	kContract:  {"effect", "revision"},
	kRetry:     {"prior_call_id", "prior_seq", "plan_id", "basis", "review", "issued_at", "signer", "sig"},
	kReview:    {"v", "session", "call_id", "operator", "evidence", "verdict", "at", "signer", "sig"},
	kRequest:   {"v", "request_id", "session", "task", "tool", "arguments", "provider_call_id"},
}

// childKind returns the kind of the object value of member name in an
// object of kind k.
func childKind(k objKind, name string) objKind {
	switch k {
	case kEnvelope:
		switch name {
		case "call":
			return kCall
		case "started":
			return kStarted
		case "result":
			return kResult
		case "fence":
			return kFence
		}
	case kCall:
		if name == "operation" {
			return kOperation
		}
	case kOperation:
		switch name {
		case "contract":
			return kContract
		case "retry":
			return kRetry
		}
	case kRetry:
		if name == "review" {
			return kReview
		}
	}
	return kOpaque
}

var errScan = errors.New("invalid JSON")

func (s *scanner) fail(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errScan, s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) reset(b []byte) {
	s.b = b
	s.pos = 0
	s.present = [nKinds]uint32{}
	for i := range s.stack {
		s.stack[i].set = nil
	}
	s.stack = s.stack[:0]
	clear(s.keys)
	s.keys = s.keys[:0]
	s.spans = s.spans[:0]
	s.pendBit = -1
}

func (s *scanner) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// scan checks b as one JSON value (with optional surrounding whitespace).
func (s *scanner) scan(b []byte) error {
	s.reset(b)
	next := s.root
	for {
		// A value is expected at s.pos.
		s.ws()
		if s.pos >= len(s.b) {
			return s.fail("unexpected end of input")
		}
		switch c := s.b[s.pos]; {
		case c == '{':
			s.pos++
			if len(s.stack) >= maxDepth {
				return s.fail("nesting deeper than %d", maxDepth)
			}
			s.stack = append(s.stack, frame{obj: true, kind: next, keyStart: len(s.keys)})
			s.pendBit = -1
			s.ws()
			if s.pos < len(s.b) && s.b[s.pos] == '}' {
				s.pos++
				s.pop()
				break
			}
			k, err := s.member()
			if err != nil {
				return err
			}
			next = k
			continue
		case c == '[':
			s.pos++
			if len(s.stack) >= maxDepth {
				return s.fail("nesting deeper than %d", maxDepth)
			}
			s.stack = append(s.stack, frame{})
			s.pendBit = -1
			s.ws()
			if s.pos < len(s.b) && s.b[s.pos] == ']' {
				s.pos++
				s.pop()
				break
			}
			next = kOpaque
			continue
		case c == '"':
			if _, _, err := s.str(); err != nil {
				return err
			}
		case c == 't':
			if err := s.lit("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := s.lit("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := s.lit("null"); err != nil {
				return err
			}
			if s.pendBit >= 0 {
				s.present[s.pendKind] &^= 1 << s.pendBit
			}
		case c == '-' || c >= '0' && c <= '9':
			if err := s.number(); err != nil {
				return err
			}
		default:
			return s.fail("unexpected character %q", c)
		}
		s.pendBit = -1
		// A value ended: close containers or move to the next element.
		for {
			if len(s.stack) == 0 {
				s.ws()
				if s.pos != len(s.b) {
					return s.fail("data after the value")
				}
				return nil
			}
			s.ws()
			if s.pos >= len(s.b) {
				return s.fail("unexpected end of input")
			}
			c := s.b[s.pos]
			s.pos++
			top := &s.stack[len(s.stack)-1]
			if top.obj {
				if c == '}' {
					s.pop()
					continue
				}
				if c != ',' {
					s.pos--
					return s.fail("expected ',' or '}' after an object member")
				}
				s.ws()
				k, err := s.member()
				if err != nil {
					return err
				}
				next = k
				break
			}
			if c == ']' {
				s.pop()
				continue
			}
			if c != ',' {
				s.pos--
				return s.fail("expected ',' or ']' after an array element")
			}
			next = kOpaque
			break
		}
	}
}

func (s *scanner) pop() {
	top := &s.stack[len(s.stack)-1]
	if top.obj {
		clear(s.keys[top.keyStart:])
		s.keys = s.keys[:top.keyStart]
	}
	top.set = nil
	s.stack = s.stack[:len(s.stack)-1]
}

// member reads `"name":` in the innermost object, checks the name, and
// returns the kind of the member's value if it is an object.
func (s *scanner) member() (objKind, error) {
	if s.pos >= len(s.b) || s.b[s.pos] != '"' {
		return 0, s.fail("expected a member name")
	}
	start := s.pos
	raw, esc, err := s.str()
	if err != nil {
		return 0, err
	}
	name := raw
	if esc {
		name = unescape(raw)
	}
	top := &s.stack[len(s.stack)-1]
	if top.set != nil {
		if _, dup := top.set[string(name)]; dup {
			s.pos = start
			return 0, s.fail("duplicate member name %s", quoteShort(name))
		}
		top.set[string(name)] = struct{}{}
	} else {
		for _, k := range s.keys[top.keyStart:] {
			if bytes.Equal(k, name) {
				s.pos = start
				return 0, s.fail("duplicate member name %s", quoteShort(name))
			}
		}
		s.keys = append(s.keys, name)
		if len(s.keys)-top.keyStart > dupSetThreshold {
			top.set = make(map[string]struct{}, 2*dupSetThreshold)
			for _, k := range s.keys[top.keyStart:] {
				top.set[string(k)] = struct{}{}
			}
		}
	}
	kind := kOpaque
	if top.kind != kOpaque {
		found := false
		for i, f := range kindFields[top.kind] {
			if f == string(name) {
				s.present[top.kind] |= 1 << i
				s.pendBit, s.pendKind = i, top.kind
				kind = childKind(top.kind, f)
				found = true
				break
			}
		}
		if !found {
			for _, f := range kindFields[top.kind] {
				if bytes.EqualFold([]byte(f), name) {
					s.pos = start
					return 0, s.fail("member name %s differs from %q only in case", quoteShort(name), f)
				}
			}
		}
	}
	s.ws()
	if s.pos >= len(s.b) || s.b[s.pos] != ':' {
		return 0, s.fail("expected ':' after a member name")
	}
	s.pos++
	return kind, nil
}

// str reads a string at s.pos (the opening quote) and returns its raw
// content and whether it holds escapes.
func (s *scanner) str() (raw []byte, esc bool, err error) {
	b := s.b
	start := s.pos + 1
	i := start
	for i < len(b) {
		c := b[i]
		if plain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			s.pos = i + 1
			return b[start:i], esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				s.pos = i
				return nil, false, s.fail("unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(b, i+2)
				if !ok {
					s.pos = i
					return nil, false, s.fail("invalid \\u escape")
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 {
						s.pos = i - 6
						return nil, false, s.fail("lone low surrogate \\u%04x", r)
					}
					var r2 rune
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						r2, ok = hex4(b, i+2)
					} else {
						ok = false
					}
					if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
						s.pos = i - 6
						return nil, false, s.fail("lone high surrogate \\u%04x", r)
					}
					i += 6
				}
			default:
				s.pos = i
				return nil, false, s.fail("invalid escape")
			}
		case c < 0x20:
			s.pos = i
			return nil, false, s.fail("control character in string")
		case c < 0x80:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				s.pos = i
				return nil, false, s.fail("invalid UTF-8")
			}
			i += size
		}
	}
	s.pos = i
	return nil, false, s.fail("unterminated string")
}

// plain marks the bytes a string may hold as they are: printable ASCII
// other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// unescape decodes the content of a string the scanner has validated.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(raw, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(raw, i+2)
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return out
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.pos < len(word) || string(s.b[s.pos:s.pos+len(word)]) != word {
		return s.fail("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// skipDigits returns the index of the first byte of b at or after i that is
// not an ASCII digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// number reads an RFC 8259 number at s.pos.
func (s *scanner) number() error {
	b := s.b
	start := s.pos
	i := s.pos
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		s.pos = i
		return s.fail("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		d := i + 1
		if i = skipDigits(b, d); i == d {
			s.pos = i
			return s.fail("invalid number: no digits after '.'")
		}
	}
	hasExp := false
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		hasExp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = skipDigits(b, d); i == d {
			s.pos = i
			return s.fail("invalid number: no digits in exponent")
		}
	}
	// The bounds of Canonical apply to every number, so the arguments of
	// any event DecodeEvent accepts can be canonicalized. A literal without
	// an exponent part that fits MaxNumberBytes is always within them.
	if i-start > MaxNumberBytes {
		s.pos = start
		return s.fail("number literal of %d bytes (limit %d)", i-start, MaxNumberBytes)
	}
	if hasExp {
		if _, _, _, err := decimalParts(b[start:i]); err != nil {
			s.pos = start
			return s.fail("number beyond 10^±%d", MaxNumberExponent)
		}
	}
	s.pos = i
	if s.nums {
		s.spans = append(s.spans, span{start, i})
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
