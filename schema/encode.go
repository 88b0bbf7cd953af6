package schema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
)

// EncodeEvent returns the event as one line of an exported history (without
// the newline): compact JSON, members in the order of the conformance
// fixtures, no HTML escaping, arguments and output compacted. The event must
// pass Validate and its arguments and output must be valid JSON without
// duplicate member names, so whatever EncodeEvent returns, DecodeEvent
// accepts; otherwise the error is the one DecodeEvent would return. Safe for
// concurrent use.
func EncodeEvent(ev Event) ([]byte, error) {
	return AppendEvent(nil, &ev)
}

// AppendEvent is EncodeEvent appending the line to dst (which may be nil)
// and returning the extended slice; ev is not modified. On error dst is
// returned as it was (its spare capacity may have been written).
func AppendEvent(dst []byte, ev *Event) ([]byte, error) {
	typ, err := ev.validate()
	if err != nil {
		return dst, err
	}
	if dst == nil {
		dst = make([]byte, 0, encodedSizeHint(ev, typ))
	}
	if b, ok := appendEventOf(dst, ev, typ); ok {
		return b, nil
	}
	line, err := encodeEventReflect(*ev)
	if err != nil {
		return dst, err
	}
	return append(dst, line...), nil
}

// encodedSizeHint is a guess at the length of the line of ev, an event of
// type typ (nil: unknown), enough for most events in one allocation.
func encodedSizeHint(ev *Event, typ *eventType) int {
	n := 160 + len(ev.Session) + len(ev.Type)
	if typ != nil {
		if b := &bodies[typ.body]; b.size != nil {
			n += b.size(b.get(ev))
		}
	}
	return n
}

// callSize is encodedSizeHint's guess for a call body.
func callSize(c *Call) int {
	n := 160 + len(c.CallID) + len(c.Tool) + len(c.Arguments) + len(c.RequestID) + len(c.ProviderCallID)
	if op := c.Operation; op != nil {
		n += len(op.Task) + len(op.Key) + len(op.Contract.Revision)
		if op.Retry != nil {
			n += 512
		}
	}
	return n
}

// encodeEventReflect is EncodeEvent by reflection: encoding/json, then
// DecodeEvent's reader over the result. It is the reference appendEvent
// is checked against, and what EncodeEvent falls back to for whatever
// appendEvent leaves to it.
func encodeEventReflect(ev Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&ev); err != nil {
		return nil, Errorf(CodeCorruptHistory, "event cannot be encoded: %v", err)
	}
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if _, err := decodeEvent(line); err != nil {
		return nil, err
	}
	return line, nil
}

// WriteHistory writes events as JSON Lines, one EncodeEvent line each,
// each followed by "\n" — the format HistoryReader reads and `jingwei
// export` prints. It stops at the first event that does not encode, having
// written the events before it; limits are not checked here.
func WriteHistory(w io.Writer, events []Event) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, ev := range events {
		line, err := EncodeEvent(ev)
		if err != nil {
			_ = bw.Flush()
			return err
		}
		bw.Write(line)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
