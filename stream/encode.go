package stream

import (
	"strconv"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// encodeEvent returns the payload of ev: exactly the bytes of
// schema.EncodeEvent(ev), which validates too. The runtime's most frequent
// events without free-form JSON — tool.started, and tool.result without
// output — whose strings need no escaping are written directly after
// ev.Validate(), sparing the reflection encoder and the re-scan of its
// output (encode_internal_test.go holds the two to the same bytes);
// everything else goes through schema.EncodeEvent.
func encodeEvent(ev schema.Event) ([]byte, error) {
	if b, ok, err := encodeFast(&ev); ok || err != nil {
		return b, err
	}
	return schema.EncodeEvent(ev)
}

func encodeFast(ev *schema.Event) ([]byte, bool, error) {
	started := ev.Type == schema.TypeStarted && ev.Started != nil
	result := ev.Type == schema.TypeResult && ev.Result != nil && len(ev.Result.Output) == 0
	if !started && !result || ev.Seq != 0 || ev.At.Location() != time.UTC || ev.At.Year() < 0 || ev.At.Year() > 9999 {
		return nil, false, nil
	}
	if err := ev.Validate(); err != nil {
		return nil, false, err
	}
	b := make([]byte, 0, 160+len(ev.Session)+len(ev.CallID()))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(ev.V), 10)
	b = append(b, `,"session":"`...)
	b = append(b, ev.Session...) // a valid session is [A-Za-z0-9_-]
	b = append(b, `","epoch":`...)
	b = strconv.AppendUint(b, ev.Epoch, 10)
	b = append(b, `,"at":"`...)
	b = ev.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":"`...)
	b = append(b, ev.Type...)
	if started {
		if !plain(ev.Started.CallID) {
			return nil, false, nil
		}
		b = append(b, `","started":{"call_id":"`...)
		b = append(b, ev.Started.CallID...)
		return append(b, `"}}`...), true, nil
	}
	r := ev.Result
	if !plain(r.CallID) || !plain(string(r.Status)) || !plain(string(r.Stage)) || !plain(r.Error) {
		return nil, false, nil
	}
	b = append(b, `","result":{"call_id":"`...)
	b = append(b, r.CallID...)
	b = append(b, `","status":"`...)
	b = append(b, r.Status...)
	b = append(b, `","retryable":`...)
	b = strconv.AppendBool(b, r.Retryable)
	if r.Stage != "" {
		b = append(b, `,"stage":"`...)
		b = append(b, r.Stage...)
		b = append(b, '"')
	}
	if r.Error != "" {
		b = append(b, `,"error":"`...)
		b = append(b, r.Error...)
		b = append(b, '"')
	}
	return append(b, `}}`...), true, nil
}

// plain reports whether s is printable ASCII that JSON writes as it is (no
// quote, backslash or control character to escape).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
