package schema_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// encodeDecode encodes ev (EncodeEvent and the reference encoder must agree),
// decodes the line and requires the same event back.
func encodeDecode(t *testing.T, ev schema.Event) []byte {
	t.Helper()
	sameEncoding(t, "round trip", ev)
	b, err := schema.EncodeEvent(ev)
	if err != nil {
		t.Fatalf("EncodeEvent: %v", err)
	}
	back, err := schema.DecodeEvent(b)
	if err != nil {
		t.Fatalf("DecodeEvent(%s): %v", b, err)
	}
	if !reflect.DeepEqual(back, ev) {
		t.Fatalf("DecodeEvent(%s):\n got %+v\nwant %+v", b, back, ev)
	}
	return b
}

// TestAddedStatusAndStageRoundTrip adds a result status and an admission
// stage to their tables and nothing else: a result carrying them is
// written, read back and validated; before they are added and after they
// are removed, the same event is corrupt_history on both sides, never a
// panic.
func TestAddedStatusAndStageRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	result := func(status schema.Status, stage schema.Stage) schema.Event {
		return schema.Event{V: 1, Seq: 2, Session: "s-1", Epoch: 1, At: at, Type: schema.TypeResult,
			Result: &schema.Result{CallID: "c-1", Status: status, Stage: stage, Output: json.RawMessage(`{"x":1}`)}}
	}
	const (
		deferred schema.Status = "deferred"
		quota    schema.Stage  = "quota"
	)
	line := []byte(`{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.result","result":{"call_id":"c-1","status":"rejected","retryable":false,"stage":"quota","output":{"x":1}}}`)
	refused := func(when string) {
		t.Helper()
		for _, ev := range []schema.Event{result(deferred, ""), result(schema.StatusRejected, quota)} {
			if _, err := schema.EncodeEvent(ev); schema.CodeOf(err) != schema.CodeCorruptHistory {
				t.Errorf("%s: EncodeEvent(%s, %q) = %v, want corrupt_history", when, ev.Result.Status, ev.Result.Stage, err)
			}
		}
		if _, err := schema.DecodeEvent(line); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Errorf("%s: DecodeEvent = %v, want corrupt_history", when, err)
		}
	}
	refused("before")
	removeStatus, removeStage := schema.AddStatus(deferred), schema.AddStage(quota)
	if !deferred.Valid() || !quota.Valid() {
		t.Fatal("added values are not Valid")
	}
	if s := schema.Statuses(); s[len(s)-1] != deferred {
		t.Errorf("Statuses() = %v, want %s last", s, deferred)
	}
	encodeDecode(t, result(deferred, ""))
	if b := encodeDecode(t, result(schema.StatusRejected, quota)); string(b) != string(line) {
		t.Errorf("rejected at %s:\n got %s\nwant %s", quota, b, line)
	}
	removeStatus()
	removeStage()
	refused("after")
}
