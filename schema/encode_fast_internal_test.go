package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
)

// TestAppendEventTakesTheHotPath: the events a runtime appends are encoded
// by appendEvent itself, not handed to the reference encoder (which
// TestEncodeEventMatchesReflect could not tell apart), and the cases it
// must leave to the reference are left to it.
func TestAppendEventTakesTheHotPath(t *testing.T) {
	at := time.Now().UTC()
	op := &Operation{Task: "t", Key: "k", Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "r"}}
	fast := []Event{
		{V: 1, Session: "s", Epoch: 1, At: at, Type: TypeCall, Call: &Call{CallID: "c", Tool: "t", Arguments: json.RawMessage(`{"a":[1,"x"]}`), Started: true, Operation: op}},
		{V: 1, Session: "s", Epoch: 1, At: at, Type: TypeCall, Call: &Call{CallID: "c", Tool: "t", Arguments: json.RawMessage("{ \"a\": 1 }"), Operation: op}},
		{V: 1, Session: "s", Epoch: 1, At: at, Type: TypeStarted, Started: &Started{CallID: "c"}},
		{V: 1, Session: "s", Epoch: 1, At: at, Type: TypeResult, Result: &Result{CallID: "c", Status: StatusFailed, Error: "no \"such\" file\n", Output: json.RawMessage(`"` + strings.Repeat("é", 100) + `"`)}},
		{V: 1, Session: "s", Epoch: 1, At: at, Type: TypeFenced, Fence: &Fence{Epoch: 1, Owner: "w"}},
		{V: 1, Session: "s", Epoch: 1, At: at, Type: "tool.progress"},
	}
	for i := range fast {
		if err := fast[i].Validate(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if _, ok := appendEvent(nil, &fast[i]); !ok {
			t.Errorf("event %d (%s) left to the reference encoder", i, fast[i].Type)
		}
	}
	slow := map[string]Event{
		"bad utf8 string": {V: 1, Session: "s", Epoch: 1, At: at, Type: TypeStarted, Started: &Started{CallID: "c\xff"}},
		"local time":      {V: 1, Session: "s", Epoch: 1, At: at.Local().In(time.FixedZone("X", 60)), Type: TypeStarted, Started: &Started{CallID: "c"}},
		"year 10000":      {V: 1, Session: "s", Epoch: 1, At: at.AddDate(9000, 0, 0), Type: TypeStarted, Started: &Started{CallID: "c"}},
		"duplicate names": {V: 1, Session: "s", Epoch: 1, At: at, Type: TypeResult, Result: &Result{CallID: "c", Status: StatusOK, Output: json.RawMessage(`{"a":1,"a":1}`)}},
		"deep":            {V: 1, Session: "s", Epoch: 1, At: at, Type: TypeResult, Result: &Result{CallID: "c", Status: StatusOK, Output: json.RawMessage(strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1))}},
		"approval":        {V: 1, Session: "s", Epoch: 1, At: at, Type: TypeApprovalRequested, ApprovalRequest: &ApprovalRequest{CallID: "c", Deadline: at}},
	}
	for name, ev := range slow {
		if _, ok := appendEvent(nil, &ev); ok {
			t.Errorf("%s: encoded by appendEvent, want the reference encoder", name)
		}
	}
}

// TestRawDepth counts nesting outside strings only.
func TestRawDepth(t *testing.T) {
	for in, want := range map[string]int{`1`: 0, `[]`: 1, `[{"a":[1]}]`: 3, `["[[[",{"\"[":{}}]`: 3, `"\\"`: 0, `[[]`: 2} {
		if got := rawDepth([]byte(in)); got != want {
			t.Errorf("rawDepth(%s) = %d, want %d", in, got, want)
		}
	}
}

// FuzzSimpleJSON: whatever simpleJSON accepts, DecodeEvent's reader
// accepts too (the shortcut may only ever say less).
func FuzzSimpleJSON(f *testing.F) {
	for _, s := range []string{`{"sku":"A-1","qty":1}`, `[1,-0,"x",true,false,null,{}]`, `{"a":1,"a":2}`, `01`, `-`, `1.5`, `[1,]`, `{"a":}`, `"\u0041"`, `"a`, `{"a":1}x`, `tru`, `nulll`, `[[[[]]]]`, `{"":0}`, `"` + "\x7f" + `"`, `"é"`, `[` + strings.Repeat("1", MaxNumberBytes+1) + `]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !simpleJSON(v) {
			return
		}
		r := getReader(v)
		defer putReader(r)
		if _, err := r.dec.ReadValue(); err != nil {
			t.Fatalf("simpleJSON accepts %q, the reader does not: %v", v, err)
		}
		if err := checkEnd(r.dec, v); err != nil {
			t.Fatalf("simpleJSON accepts %q with data after the value: %v", v, err)
		}
		if err := checkNumbers(v); err != nil {
			t.Fatalf("simpleJSON accepts %q, checkNumbers does not: %v", v, err)
		}
	})
}

// TestSimpleJSON pins the shortcut's answers on both sides of its rules.
func TestSimpleJSON(t *testing.T) {
	for in, want := range map[string]bool{
		`{"sku":"A-1","qty":1}`: true, `[1,-0,"x",true,false,null,{},[]]`: true, `{"a":{"a":1}}`: true, `""`: true, `0`: true, `-12`: true,
		`{"a":1,"a":2}`: false, `01`: false, `-`: false, `1.5`: false, `1e3`: false, `[1,]`: false, `{"a":}`: false, `"\u0041"`: false,
		`"a`: false, `{"a":1}x`: false, `tru`: false, `nulll`: false, ` 1`: false, `"é"`: false, "\"\x7f\"": false, "\"\x1f\"": false,
		strings.Repeat("[", 33) + strings.Repeat("]", 33): false, strings.Repeat("[", 32) + strings.Repeat("]", 32): true,
		`[` + strings.Repeat("1", MaxNumberBytes) + `]`: true, `[` + strings.Repeat("1", MaxNumberBytes+1) + `]`: false,
	} {
		if got := simpleJSON([]byte(in)); got != want {
			t.Errorf("simpleJSON(%.40q) = %v, want %v", in, got, want)
		}
	}
}
