package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

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

// FuzzDecoders feeds the same bytes to every decoder of the package (the
// recovery worker's classifier reads events with DecodeEvent itself, so it
// has no entry point of its own) and requires them to agree:
//
//   - every line gets the same verdict and, when accepted, the same event
//     from DecodeEvent and from HistoryReader (the path of DecodeHistory
//     and `jingwei inspect`), the reader's error naming the line;
//   - Canonical and Unmarshal (into a jsontext.Value) accept exactly the
//     same inputs: one lexical language for the whole package;
//   - an input any message decoder accepts, Canonical accepts, and the
//     decoded value is what the generic Unmarshal into the exported type
//     makes of it (for an event of a known type) and survives
//     json.Marshal and decoding again unchanged.
//
// Seeds: every conformance fixture (whole, and line by line), the fixture
// reviews, the corpus under testdata/fuzz/FuzzDecoders (which includes the
// recovery worker's former FuzzDecodeWire corpus), and the seeds of
// FuzzDecodeHistory.
func FuzzDecoders(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		jl := fx.jsonl()
		f.Add(jl)
		for line := range bytes.SplitSeq(jl, []byte("\n")) {
			f.Add(bytes.Clone(line))
		}
		if len(fx.Review) > 0 {
			f.Add([]byte(fx.Review))
		}
	}
	for _, s := range []string{
		okCall, okPlan, okReview, okAssessment, "[" + okAssessment + "," + okAssessment + "]",
		ev(`"type":"tool.progress","call":{"x":1}`),
		call(`{"call_id":"c-1","tool":"t","arguments":{"a":1,"\u0061":2}}`),
		op(`{"task":"t","key":"k","contract":{"revision":"r"},"retry":{"prior_call_id":"c-0","prior_seq":3,"plan_id":"p-1","basis":"reviewed_not_executed","issued_at":"2026-11-29T10:00:00Z","signer":"` + testSigner + `","sig":"c2ln","review":{"v":1,"session":"s-1","call_id":"c-0","operator":"alice","evidence":"t-1","verdict":"not_executed"}}}`),
		ev(`"type":"tool.result","result":{"call_id":"c-1","status":"ok","status":"failed"}`),
		ev(`"type":"tool.result","result":{"call_id":"c-1","status":"rejected","stage":"budget","retryable":false,"output":[1.5e300,"\u2028",null],"error":"<&>"}`),
		`{"v":1,"session":"s","epoch":1,"at":"2026-11-29T10:00:01+05:30","type":"x","Session":"y"}`,
		`{"v":1,"request_id":"r-9","session":"s-1","task":"t-1","tool":"orders.create","arguments":{"sku":"A","qty":1e400},"provider_call_id":"toolu_1"}`,
		`{"a":[1,{"b":null}],"\u20ac":"x","n":-0.0e5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Line by line: DecodeEvent and HistoryReader (with limits the
		// input cannot reach).
		lines := bytes.Split(data, []byte("\n"))
		h := schema.NewHistoryReader(bytes.NewReader(data), schema.Limits{MaxEvents: len(lines) + 1, MaxBytes: int64(len(data)) + 1})
		for n, line := range lines {
			if len(bytes.Trim(line, " \t\r")) == 0 {
				continue // the reader skips blank lines
			}
			e1, err1 := schema.DecodeEvent(line)
			e2, err2 := h.Next()
			switch {
			case (err1 == nil) != (err2 == nil):
				t.Fatalf("line %d %q: DecodeEvent says %v, HistoryReader %v", n+1, line, err1, err2)
			case err1 != nil:
				want := schema.Errorf(schema.CodeOf(err1), "line %d: %s", n+1, err1.(*schema.Error).Message)
				if err2.Error() != want.Error() {
					t.Fatalf("line %d: HistoryReader error %q, want %q", n+1, err2, want)
				}
				h = nil
			case !reflect.DeepEqual(e1, e2):
				t.Fatalf("line %d: DecodeEvent %+v, HistoryReader %+v", n+1, e1, e2)
			}
			if h == nil {
				break
			}
		}
		checkDecoders(t, data)
	})
}

// checkDecoders checks the single-input agreements of FuzzDecoders.
func checkDecoders(t *testing.T, data []byte) {
	_, cerr := schema.Canonical(data)
	var raw jsontext.Value
	uerr := schema.Unmarshal(data, &raw)
	if (cerr == nil) != (uerr == nil) {
		t.Fatalf("%q: Canonical says %v, Unmarshal %v", data, cerr, uerr)
	}
	if cerr != nil && (!errors.Is(cerr, schema.ErrInvalidJSON) || !errors.Is(uerr, schema.ErrInvalidJSON)) {
		t.Fatalf("errors not ErrInvalidJSON: %v, %v", cerr, uerr)
	}
	accepted := func(what string, err error) bool {
		if err == nil && cerr != nil {
			t.Fatalf("%q: %s accepts what Canonical refuses (%v)", data, what, cerr)
		}
		return err == nil
	}
	if e, err := schema.DecodeEvent(data); accepted("DecodeEvent", err) {
		if e.Call != nil {
			if _, err := schema.Canonical(e.Call.Arguments); err != nil {
				t.Fatalf("arguments of an accepted call do not canonicalize: %v", err)
			}
		}
		if e.Call != nil || e.Started != nil || e.Result != nil || e.Fence != nil {
			var g schema.Event
			if err := schema.Unmarshal(data, &g); err != nil || !sameEvent(e, g) {
				t.Fatalf("%q: DecodeEvent %+v, Unmarshal %+v (%v)", data, e, g, err)
			}
		}
		roundTrip(t, e, func(b []byte) (schema.Event, error) { return schema.DecodeEvent(b) }, sameEvent)
	}
	if r, err := schema.DecodeReview(data); accepted("DecodeReview", err) {
		var g schema.Review
		if err := schema.Unmarshal(data, &g); err != nil || g != r {
			t.Fatalf("%q: DecodeReview %+v, Unmarshal %+v (%v)", data, r, g, err)
		}
		roundTrip(t, r, schema.DecodeReview, func(a, b schema.Review) bool { return a == b })
	}
	if r, err := schema.DecodeRequest(data); accepted("DecodeRequest", err) {
		roundTrip(t, r, schema.DecodeRequest, func(a, b schema.Request) bool { return reflect.DeepEqual(a, b) })
	}
	if p, err := schema.DecodePlan(data); accepted("DecodePlan", err) {
		roundTrip(t, p, schema.DecodePlan, func(a, b schema.Plan) bool {
			return a.IssuedAt.Equal(b.IssuedAt) && reflect.DeepEqual(normPlan(a), normPlan(b))
		})
	}
	if a, err := schema.DecodeAssessment(data); accepted("DecodeAssessment", err) {
		b, err := schema.EncodeAssessment(&a)
		if err != nil {
			t.Fatal(err)
		}
		back, err := schema.DecodeAssessment(b)
		if err != nil || !reflect.DeepEqual(a, back) {
			t.Fatalf("assessment changed through EncodeAssessment: %+v, %+v (%v)", a, back, err)
		}
	}
	if as, err := schema.DecodeAssessments(data); accepted("DecodeAssessments", err) {
		b, err := schema.EncodeAssessments(as)
		if err != nil {
			t.Fatal(err)
		}
		back, err := schema.DecodeAssessments(b)
		if err != nil || !reflect.DeepEqual(as, back) {
			t.Fatalf("assessments changed through EncodeAssessments: %+v, %+v (%v)", as, back, err)
		}
		if a, err := schema.DecodeAssessment(data); (err == nil) != (len(as) == 1 && firstNonSpace(data) == '{') || err == nil && !reflect.DeepEqual(a, as[0]) {
			t.Fatalf("DecodeAssessment %+v (%v) disagrees with DecodeAssessments %+v", a, err, as)
		}
	}
}

func normPlan(p schema.Plan) schema.Plan {
	p.IssuedAt = time.Time{}
	var buf bytes.Buffer
	if json.Compact(&buf, p.Arguments) == nil {
		p.Arguments = buf.Bytes()
	}
	return p
}

// roundTrip checks that v survives json.Marshal and decode unchanged.
func roundTrip[T any](t *testing.T, v T, decode func([]byte) (T, error), same func(a, b T) bool) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%+v does not marshal: %v", v, err)
	}
	back, err := decode(b)
	if err != nil {
		t.Fatalf("%s: re-decoding what Go encodes: %v", b, err)
	}
	if !same(v, back) {
		t.Fatalf("changed through json.Marshal:\n%+v\n%+v", v, back)
	}
}

// firstNonSpace returns the first byte of b after JSON whitespace, or 0.
func firstNonSpace(b []byte) byte {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c
		}
	}
	return 0
}
