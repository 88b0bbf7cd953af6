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
