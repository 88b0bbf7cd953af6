package effect_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestAddedKindRoundTrips adds an effect kind the way a contributor would
// (a row in effect's table, nothing else) and follows it through every
// reader and writer of contracts: EncodeEvent writes it, DecodeEvent reads
// it back, the assessment and plan decoders accept it, and recovery.Inspect
// classifies an uncertain call under it by the safety its row declares.
// Before the row is added, and after it is removed, the same bytes are an
// error everywhere, never a panic.
func TestAddedKindRoundTrips(t *testing.T) {
	const name = "replayable"
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	line := []byte(`{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"start_marker":false,"operation":{"task":"t-1","key":"k-1","contract":{"effect":"` + name + `","revision":"r1"}}}}`)
	refused := func(when string) {
		t.Helper()
		if _, err := schema.DecodeEvent(line); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Errorf("%s: DecodeEvent = %v, want corrupt_history", when, err)
		}
		if _, err := effect.Parse(name); !errors.Is(err, effect.ErrUnknownEffect) {
			t.Errorf("%s: Parse(%q) = %v, want ErrUnknownEffect", when, name, err)
		}
	}
	refused("before the kind is added")
	for _, safe := range []bool{false, true} {
		e, remove := effect.AddKind(name, safe)
		func() {
			defer remove()
			if !e.Valid() || e.String() != name || e.Safe() != safe {
				t.Fatalf("added kind: Valid %v, String %q, Safe %v", e.Valid(), e, e.Safe())
			}
			if got, err := effect.Parse(name); err != nil || got != e {
				t.Fatalf("Parse(%q) = %v, %v", name, got, err)
			}
			ev := schema.Event{V: 1, Seq: 1, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeCall, Call: &schema.Call{
				CallID: "c-1", Tool: "t", Arguments: json.RawMessage(`{}`),
				Operation: &schema.Operation{Task: "t-1", Key: "k-1", Contract: effect.Contract{Effect: e, Revision: "r1"}},
			}}
			b, err := schema.EncodeEvent(ev)
			if err != nil {
				t.Fatalf("EncodeEvent: %v", err)
			}
			if string(b) != string(line) {
				t.Fatalf("EncodeEvent:\n got %s\nwant %s", b, line)
			}
			back, err := schema.DecodeEvent(b)
			if err != nil {
				t.Fatalf("DecodeEvent: %v", err)
			}
			if !reflect.DeepEqual(back, ev) {
				t.Fatalf("DecodeEvent:\n got %+v\nwant %+v", back, ev)
			}
			a, err := recovery.Inspect(schema.Events([]schema.Event{back}), "c-1")
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			want := schema.DecisionNeedsReview
			if safe {
				want = schema.DecisionRetryAllowed
			}
			if a.Contract.Effect != e || a.Outcome != schema.OutcomeUncertain || a.Decision != want {
				t.Fatalf("Inspect = %+v, want an uncertain call under %s, %s", a, name, want)
			}
			ab, err := schema.EncodeAssessment(&a)
			if err != nil || !strings.Contains(string(ab), `"effect":"`+name+`"`) {
				t.Fatalf("EncodeAssessment = %s, %v", ab, err)
			}
			if got, err := schema.DecodeAssessment(ab); err != nil || !reflect.DeepEqual(got, a) {
				t.Fatalf("DecodeAssessment = %+v, %v; want %+v", got, err, a)
			}
		}()
	}
	refused("after the kind is removed")
}
