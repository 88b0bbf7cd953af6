package worker

import (
	"bytes"
	"encoding/json"
	"strings"
)

// WhenAbove is the ApprovalRule.When of the "FIELD>N" rules of the
// catalog and of --require-approval: a call asks for approval when the
// number at the dotted path field of its arguments is above n, or when
// there is no number there (a missing or non-numeric field is not
// "small": it asks).
func WhenAbove(field string, n float64) func(args json.RawMessage) bool {
	return func(args json.RawMessage) bool {
		v, ok := numberAt(args, field)
		return !ok || v > n
	}
}

// numberAt returns the number at a dotted path of a JSON object.
func numberAt(doc []byte, path string) (float64, bool) {
	cur := json.RawMessage(doc)
	for key := range strings.SplitSeq(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(cur, &m) != nil {
			return 0, false
		}
		v, ok := m[key]
		if !ok {
			return 0, false
		}
		cur = v
	}
	d := json.NewDecoder(bytes.NewReader(cur))
	d.UseNumber()
	var n json.Number
	if d.Decode(&n) != nil {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}
