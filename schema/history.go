package schema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"
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
// loading the rest. Blank lines are skipped. Not safe for concurrent use.
type HistoryReader struct {
	br   *bufio.Reader
	lim  Limits
	n    int
	read int64
	line int
	err  error
}

// NewHistoryReader returns a reader over r with the given limits (zero
// fields mean the defaults).
func NewHistoryReader(r io.Reader, lim Limits) *HistoryReader {
	return &HistoryReader{br: bufio.NewReaderSize(r, 64<<10), lim: lim.WithDefaults()}
}

// Next returns the next event, or io.EOF after the last one. Errors are
// *Error with code corrupt_history or history_too_large and name the line.
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
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		h.n++
		if h.n > h.lim.MaxEvents {
			h.err = Errorf(CodeHistoryTooLarge, "history has more than %d events (limit)", h.lim.MaxEvents)
			return Event{}, h.err
		}
		ev, err := DecodeEvent(line)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				h.err = &Error{Code: e.Code, Message: "line " + itoa(h.line) + ": " + e.Message}
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

func (h *HistoryReader) readLine() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := h.br.ReadSlice('\n')
		h.read += int64(len(chunk))
		if h.read > h.lim.MaxBytes {
			return nil, Errorf(CodeHistoryTooLarge, "history is larger than %d bytes (limit)", h.lim.MaxBytes)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			h.line++
			return buf, nil
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(buf) == 0 {
				return nil, io.EOF
			}
			h.line++
			return buf, nil
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

// DecodeEvent decodes and validates one event. A malformed event (bad JSON,
// a required field missing, a body that does not match its type) is a
// corrupt_history *Error.
func DecodeEvent(b []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(b, &ev); err != nil {
		return Event{}, Errorf(CodeCorruptHistory, "invalid event: %v", err)
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Validate checks that the event has the fields its type requires.
func (e *Event) Validate() error {
	if e.V != Version {
		return Errorf(CodeCorruptHistory, "event has schema version %d, want %d", e.V, Version)
	}
	if e.Session == "" || e.Type == "" {
		return Errorf(CodeCorruptHistory, "event lacks session or type")
	}
	switch e.Type {
	case TypeCall:
		if e.Call == nil || e.Call.CallID == "" || e.Call.Tool == "" {
			return Errorf(CodeCorruptHistory, "tool.call lacks call, call_id or tool")
		}
	case TypeStarted:
		if e.Started == nil || e.Started.CallID == "" {
			return Errorf(CodeCorruptHistory, "tool.started lacks started.call_id")
		}
	case TypeResult:
		if e.Result == nil || e.Result.CallID == "" || !e.Result.Status.Valid() {
			return Errorf(CodeCorruptHistory, "tool.result lacks call_id or a valid status")
		}
	case TypeFenced:
		if e.Fence == nil {
			return Errorf(CodeCorruptHistory, "session.fenced lacks fence")
		}
	}
	return nil
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
