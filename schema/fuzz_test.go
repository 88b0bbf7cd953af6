package schema_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

// FuzzDecodeHistory feeds arbitrary JSON Lines to the history decoder,
// seeded with every conformance fixture's history. It must never panic; an
// error must be a *schema.Error with a history code; and every event it
// accepts must re-encode, re-decode to the same value, re-encode to the
// same bytes, have canonicalizable arguments, and validate against
// event.schema.json.
func FuzzDecodeHistory(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add(fx.jsonl())
	}
	f.Add([]byte(okCall + "\n" + ev(`"type":"tool.progress","call":{"x":1}`) + "\n"))
	f.Add([]byte(call(`{"call_id":"c-1","tool":"t","arguments":{"a":1,"\u0061":2}}`)))
	f.Add([]byte(op(`{"task":"t","key":"k","contract":{"effect":"unknown","revision":"r"},"retry":{"prior_call_id":"c-0","prior_seq":3,"plan_id":"p-1","basis":"reviewed_not_executed","review":{"v":1,"session":"s-1","call_id":"c-0","operator":"alice","evidence":"t-1","verdict":"not_executed","at":"2026-11-29T11:00:00Z","signer":"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4","sig":"c2ln"}}}`) + "\n" +
		ev(`"type":"tool.result","result":{"call_id":"c-1","status":"rejected","stage":"budget","retryable":false,"output":[1.5e300,"\u2028"],"error":"<&>"}`)))
	f.Add([]byte(`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01+05:30","type":"x","Session":"y"}`))
	lim := schema.Limits{MaxEvents: 200, MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := schema.DecodeHistory(bytes.NewReader(data), lim)
		if err != nil {
			switch schema.CodeOf(err) {
			case schema.CodeCorruptHistory, schema.CodeFieldTooLong, schema.CodeHistoryTooLarge:
			default:
				t.Fatalf("error without a history code: %v", err)
			}
			return
		}
		for i, e := range evs {
			line, err := schema.EncodeEvent(e)
			if err != nil {
				t.Fatalf("event %d decoded but does not encode: %v\n%+v", i, err, e)
			}
			back, err := schema.DecodeEvent(line)
			if err != nil {
				t.Fatalf("event %d: re-encoded line does not decode: %v\n%s", i, err, line)
			}
			again, err := schema.EncodeEvent(back)
			if err != nil || !bytes.Equal(again, line) {
				t.Fatalf("event %d: encoding is not stable (%v):\n%s\n%s", i, err, line, again)
			}
			if !sameEvent(e, back) {
				t.Fatalf("event %d changed through encode/decode:\n%+v\n%+v", i, e, back)
			}
			if e.Call != nil {
				if _, err := schema.Canonical(e.Call.Arguments); err != nil {
					t.Fatalf("event %d: arguments of an accepted call do not canonicalize: %v", i, err)
				}
			}
			if err := validate(t, "event", line); err != nil {
				t.Fatalf("event %d accepted by Go but not by event.schema.json: %v\n%s", i, err, line)
			}
		}
	})
}

// sameEvent compares two events as values: the same instant for At, and
// arguments and output equal once compacted.
func sameEvent(a, b schema.Event) bool {
	if !a.At.Equal(b.At) {
		return false
	}
	a.At = b.At
	compact := func(m *json.RawMessage) {
		if len(*m) == 0 {
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, *m); err == nil {
			*m = buf.Bytes()
		}
	}
	norm := func(e *schema.Event) {
		if e.Call != nil {
			c := *e.Call
			compact(&c.Arguments)
			e.Call = &c
		}
		if e.Result != nil {
			r := *e.Result
			compact(&r.Output)
			e.Result = &r
		}
	}
	norm(&a)
	norm(&b)
	return reflect.DeepEqual(a, b)
}
