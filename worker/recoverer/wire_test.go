package recoverer

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/testhistory"
	"github.com/jingwei/jingwei/schema"
)

// sameWire compares the fast and the encoding/json decoding of data.
func sameWire(t *testing.T, data []byte) {
	t.Helper()
	var fast, slow wireEvent
	ferr := decodeWire(data, &fast)
	serr := decodeWireSlow(data, &slow)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("%s: fast err %v, slow err %v", data, ferr, serr)
	}
	if ferr != nil {
		return
	}
	if string(fast.callID) != string(slow.callID) || string(fast.startedID) != string(slow.startedID) || string(fast.resultID) != string(slow.resultID) {
		t.Fatalf("%s: call ids %q %q %q vs %q %q %q", data, fast.callID, fast.startedID, fast.resultID, slow.callID, slow.startedID, slow.resultID)
	}
	fast.callID, slow.callID, fast.startedID, slow.startedID, fast.resultID, slow.resultID = nil, nil, nil, nil, nil, nil
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s:\nfast %+v\nslow %+v", data, fast, slow)
	}
}

func TestDecodeWireMatchesEncodingJSON(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		h := testhistory.Generate(testhistory.Config{Events: 500, Seed: seed})
		for _, ev := range h.Events {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			sameWire(t, b)
			e, err := schema.EncodeEvent(ev)
			if err != nil {
				t.Fatal(err)
			}
			sameWire(t, e)
		}
	}
	for _, s := range []string{
		`{"v":1,"epoch":3,"type":"tool.call","call":{"call_id":"c\u002d1","tool":"t","arguments":{"a":"}\"]"},"start_marker":true,"operation":{"task":"t","key":"k","contract":{"effect":"idempotent","revision":"r"},"retry":null}}}`,
		` { "type" : "tool.result" , "result" : { "call_id" : "c-1" , "status" : "rejected" , "stage" : "budget" , "output" : [1, {"x": [true, null]}] , "retryable" : false } , "epoch" : 2 } `,
		`{"type":"tool.started","started":{"call_id":"c-1"},"extra":[1,2,"3"],"epoch":1}`,
		`{"type":"session.fenced","fence":{"epoch":9,"owner":"o"},"epoch":9}`,
		`{"type":"tool.call","call":{"call_id":"c-1","operation":{"task":"t","key":"k","contract":{"effect":"non_idempotent","revision":"r"},"retry":{"prior_call_id":"c-0","prior_seq":3}}}}`,
		`{"type":"tool.call","call":{"call_id":"c-1","operation":{"contract":{"effect":"nope"}}}}`,
		`{"type":"x.y","epoch":1.5}`,
		`{"type":"tool.result","result":null,"call":null}`,
		`{"type":"tool.result","result":{"call_id":"c-1","status":"ok"}`,
		`{"type":}`,
		`[1,2]`,
		`{"epoch":-1}`,
		``,
	} {
		sameWire(t, []byte(s))
	}
}

func FuzzDecodeWire(f *testing.F) {
	f.Add([]byte(`{"type":"tool.result","result":{"call_id":"c-1","status":"ok","stage":null},"epoch":2}`))
	f.Add([]byte(`{"type":"tool.call","call":{"call_id":"c","tool":"t","start_marker":false,"operation":{"task":"t","key":"k","contract":{"effect":"read_only","revision":"r"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) { sameWire(t, data) })
}

func TestAppendAssessmentIsJSON(t *testing.T) {
	for _, a := range []schema.Assessment{
		{Session: "s-1", CallID: "c-1", Tool: "orders.create", Task: "t", Key: "k", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "v1"},
			Outcome: schema.OutcomeUncertain, Evidence: "failed", Decision: schema.DecisionRetryAllowed, Attempts: 1, Chain: []string{"c-1"}},
		{Session: "s", CallID: "c\"\\\n\t\x01<é>", Tool: "\u2028", Key: "bad\xffutf8", Chain: []string{"a", "b\x00"}},
		{},
	} {
		got := appendAssessment(nil, &a)
		var back schema.Assessment
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		want, _ := json.Marshal(a)
		var wantBack schema.Assessment
		_ = json.Unmarshal(want, &wantBack)
		if !reflect.DeepEqual(back, wantBack) {
			t.Fatalf("round trip\n got %+v\nwant %+v", back, wantBack)
		}
	}
}
