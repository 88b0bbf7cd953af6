package recoverer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// wireEvent is the part of a session event the incremental classifier
// reads, flattened; arguments, outputs and unknown members are skipped.
type wireEvent struct {
	epoch uint64
	typ   string
	// callID, startedID and resultID are the call ids of the call, started
	// and result members; they alias the input: look up, do not keep.
	callID      []byte
	startedID   []byte
	resultID    []byte
	hasCall     bool
	hasStarted  bool
	hasResult   bool
	hasFence    bool
	tool        string
	startMarker bool
	hasOp       bool
	task, key   string
	contract    effect.Contract
	retry       bool
	status      schema.Status
	stage       schema.Stage
	fenceEpoch  uint64
}

// decodeWire decodes a session event into ev: a hand-rolled single pass for
// the common case, encoding/json for anything unusual (escapes in the
// fields it reads, unexpected shapes), so it accepts what json.Unmarshal
// accepts.
func decodeWire(data []byte, ev *wireEvent) error {
	*ev = wireEvent{}
	p := parser{b: data}
	if p.event(ev) && p.end() {
		return nil
	}
	return decodeWireSlow(data, ev)
}

// slowEvent is the encoding/json shape of exactly what the classifier
// reads (so that both decoders accept the same inputs).
type slowEvent struct {
	Epoch uint64 `json:"epoch"`
	Type  string `json:"type"`
	Call  *struct {
		CallID      string `json:"call_id"`
		Tool        string `json:"tool"`
		StartMarker bool   `json:"start_marker"`
		Operation   *struct {
			Task     string          `json:"task"`
			Key      string          `json:"key"`
			Contract effect.Contract `json:"contract"`
			Retry    json.RawMessage `json:"retry"`
		} `json:"operation"`
	} `json:"call"`
	Started *struct {
		CallID string `json:"call_id"`
	} `json:"started"`
	Result *struct {
		CallID string        `json:"call_id"`
		Status schema.Status `json:"status"`
		Stage  schema.Stage  `json:"stage"`
	} `json:"result"`
	Fence *struct {
		Epoch uint64 `json:"epoch"`
	} `json:"fence"`
}

func decodeWireSlow(data []byte, ev *wireEvent) error {
	*ev = wireEvent{}
	var s slowEvent
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	ev.epoch, ev.typ = s.Epoch, s.Type
	if c := s.Call; c != nil {
		ev.hasCall, ev.callID, ev.tool, ev.startMarker = true, []byte(c.CallID), c.Tool, c.StartMarker
		if op := c.Operation; op != nil {
			ev.hasOp, ev.task, ev.key, ev.contract = true, op.Task, op.Key, op.Contract
			ev.retry = len(op.Retry) > 0 && string(op.Retry) != "null"
		}
	}
	if s.Started != nil {
		ev.hasStarted, ev.startedID = true, []byte(s.Started.CallID)
	}
	if r := s.Result; r != nil {
		ev.hasResult, ev.resultID, ev.status, ev.stage = true, []byte(r.CallID), r.Status, r.Stage
	}
	if s.Fence != nil {
		ev.hasFence, ev.fenceEpoch = true, s.Fence.Epoch
	}
	return nil
}

// parser is a minimal JSON reader over one event. Every method returns
// false when the input is not what the fast path handles.
type parser struct {
	b []byte
	i int
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// str reads a string without escapes and returns its bytes (aliasing the
// input).
func (p *parser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *parser) uint() (uint64, bool) {
	p.ws()
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n, err := strconv.ParseUint(string(p.b[start:p.i]), 10, 64)
	return n, err == nil
}

func (p *parser) boolean() (bool, bool) {
	p.ws()
	switch {
	case hasPrefix(p.b[p.i:], "true"):
		p.i += 4
		return true, true
	case hasPrefix(p.b[p.i:], "false"):
		p.i += 5
		return false, true
	}
	return false, false
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// null consumes a null if one is next.
func (p *parser) null() bool {
	p.ws()
	if hasPrefix(p.b[p.i:], "null") {
		p.i += 4
		return true
	}
	return false
}

// skip skips one JSON value, checking its syntax as encoding/json does.
func (p *parser) skip() bool {
	p.ws()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.skipString()
	case c == '{':
		return p.object(func([]byte) bool { return p.skip() })
	case c == '[':
		p.i++
		if p.eat(']') {
			return true
		}
		for {
			if !p.skip() {
				return false
			}
			if p.eat(',') {
				continue
			}
			return p.eat(']')
		}
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return false
}

func (p *parser) lit(s string) bool {
	if !hasPrefix(p.b[p.i:], s) {
		return false
	}
	p.i += len(s)
	return true
}

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// number skips -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *parser) number() bool {
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if p.digits() == 0 {
		return false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

// skipString skips a string with valid escapes and no control characters.
func (p *parser) skipString() bool {
	p.i++ // the opening quote
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return false
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if p.i+4 >= len(p.b) {
					return false
				}
				for _, h := range p.b[p.i+1 : p.i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				p.i += 4
			default:
				return false
			}
		}
		p.i++
	}
	return false
}

// object reads the members of an object, calling member for each key; the
// callback reads the value (or skips it) and returns false to give up.
func (p *parser) object(member func(key []byte) bool) bool {
	if !p.eat('{') {
		return false
	}
	if p.eat('}') {
		return true
	}
	for {
		k, ok := p.str()
		if !ok || !p.eat(':') || !member(k) {
			return false
		}
		if p.eat(',') {
			continue
		}
		return p.eat('}')
	}
}

func (p *parser) event(ev *wireEvent) bool {
	return p.object(func(k []byte) bool {
		switch string(k) {
		case "epoch":
			n, ok := p.uint()
			ev.epoch = n
			return ok
		case "type":
			s, ok := p.str()
			ev.typ = internType(s)
			return ok
		case "call":
			if ev.hasCall || p.null() {
				return false // unusual: leave it to encoding/json
			}
			ev.hasCall = true
			return p.object(func(k []byte) bool {
				switch string(k) {
				case "call_id":
					s, ok := p.str()
					ev.callID = s
					return ok
				case "tool":
					s, ok := p.str()
					ev.tool = string(s)
					return ok
				case "start_marker":
					b, ok := p.boolean()
					ev.startMarker = b
					return ok
				case "operation":
					if ev.hasOp || p.null() {
						return false
					}
					ev.hasOp = true
					return p.operation(ev)
				}
				return p.other(k, "call_id", "tool", "start_marker", "operation")
			})
		case "started":
			if ev.hasStarted || p.null() {
				return false
			}
			ev.hasStarted = true
			return p.object(func(k []byte) bool {
				if string(k) == "call_id" {
					s, ok := p.str()
					ev.startedID = s
					return ok
				}
				return p.other(k, "call_id")
			})
		case "result":
			if ev.hasResult || p.null() {
				return false
			}
			ev.hasResult = true
			return p.object(func(k []byte) bool {
				switch string(k) {
				case "call_id":
					s, ok := p.str()
					ev.resultID = s
					return ok
				case "status":
					s, ok := p.str()
					ev.status = schema.Status(internStatus(s))
					return ok
				case "stage":
					if p.null() {
						return true
					}
					s, ok := p.str()
					ev.stage = schema.Stage(s)
					return ok
				}
				return p.other(k, "call_id", "status", "stage")
			})
		case "fence":
			if ev.hasFence || p.null() {
				return false
			}
			ev.hasFence = true
			return p.object(func(k []byte) bool {
				if string(k) == "epoch" {
					n, ok := p.uint()
					ev.fenceEpoch = n
					return ok
				}
				return p.other(k, "epoch")
			})
		}
		return p.other(k, "epoch", "type", "call", "started", "result", "fence")
	})
}

func (p *parser) operation(ev *wireEvent) bool {
	return p.object(func(k []byte) bool {
		switch string(k) {
		case "task":
			s, ok := p.str()
			ev.task = string(s)
			return ok
		case "key":
			s, ok := p.str()
			ev.key = string(s)
			return ok
		case "retry":
			// Retries are rare: anything but null goes to encoding/json.
			if p.null() {
				ev.retry = false
				return true
			}
			return false
		case "contract":
			if p.null() {
				return false
			}
			return p.object(func(k []byte) bool {
				switch string(k) {
				case "effect":
					s, ok := p.str()
					if !ok {
						return false
					}
					e, err := effect.Parse(string(s))
					ev.contract.Effect = e
					return err == nil
				case "revision":
					s, ok := p.str()
					ev.contract.Revision = string(s)
					return ok
				}
				return p.other(k, "effect", "revision")
			})
		}
		return p.other(k, "task", "key", "retry", "contract")
	})
}

// other skips the value of a member the fast path does not read, unless
// its key matches one it reads only case-insensitively (encoding/json
// would take it): then it gives up.
func (p *parser) other(k []byte, known ...string) bool {
	for _, n := range known {
		if bytes.EqualFold(k, []byte(n)) {
			return false
		}
	}
	return p.skip()
}

func internType(b []byte) string {
	for _, t := range [...]string{schema.TypeCall, schema.TypeStarted, schema.TypeResult, schema.TypeFenced} {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}

func internStatus(b []byte) string {
	for _, s := range [...]schema.Status{schema.StatusOK, schema.StatusRejected, schema.StatusFailed, schema.StatusTimeout, schema.StatusCancelled, schema.StatusBudgetExhausted, schema.StatusOutputLimit} {
		if string(b) == string(s) {
			return string(s)
		}
	}
	return string(b)
}

// appendAssessment appends the JSON of a (what json.Marshal writes, bar
// HTML escaping); it falls back to json.Marshal for invalid UTF-8.
func appendAssessment(buf []byte, a *schema.Assessment) []byte {
	for _, s := range [...]string{a.Session, a.CallID, a.Tool, a.Task, a.Key, a.Contract.Revision, a.Evidence} {
		if !utf8.ValidString(s) {
			b, _ := json.Marshal(a)
			return append(buf, b...)
		}
	}
	buf = append(buf, `{"session":`...)
	buf = appendString(buf, a.Session)
	buf = append(buf, `,"call_id":`...)
	buf = appendString(buf, a.CallID)
	buf = append(buf, `,"tool":`...)
	buf = appendString(buf, a.Tool)
	buf = append(buf, `,"task":`...)
	buf = appendString(buf, a.Task)
	buf = append(buf, `,"key":`...)
	buf = appendString(buf, a.Key)
	buf = append(buf, `,"contract":{"effect":`...)
	buf = appendString(buf, a.Contract.Effect.String())
	buf = append(buf, `,"revision":`...)
	buf = appendString(buf, a.Contract.Revision)
	buf = append(buf, `},"outcome":`...)
	buf = appendString(buf, string(a.Outcome))
	buf = append(buf, `,"evidence":`...)
	buf = appendString(buf, a.Evidence)
	buf = append(buf, `,"decision":`...)
	buf = appendString(buf, string(a.Decision))
	buf = append(buf, `,"attempts":`...)
	buf = strconv.AppendInt(buf, int64(a.Attempts), 10)
	buf = append(buf, `,"chain":`...)
	if a.Chain == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for i, c := range a.Chain {
			if i > 0 {
				buf = append(buf, ',')
			}
			if !utf8.ValidString(c) {
				b, _ := json.Marshal(c)
				buf = append(buf, b...)
				continue
			}
			buf = appendString(buf, c)
		}
		buf = append(buf, ']')
	}
	return append(buf, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s (valid UTF-8) as a JSON string.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
