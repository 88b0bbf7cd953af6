package schema_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
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

// TestAddedEventTypeRoundTrips adds an event type to the table and
// nothing else (call.noted, carrying a started body: a call id) and
// follows it through EncodeEvent (which must write what the reference
// encoder writes), DecodeEvent (with the body after and before the type),
// Event.CallID, a history read back by HistoryReader and recovery.Inspect,
// which accepts it where it fits and refuses it as corrupt_history where
// its own check fails. Before the row is added and after it is removed,
// the type is unknown: a body on it is refused on encoding and dropped on
// decoding, as docs/protocol.md §5 says of unknown types.
func TestAddedEventTypeRoundTrips(t *testing.T) {
	const noted = "call.noted"
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	env := func(seq uint64, typ string) schema.Event {
		return schema.Event{V: 1, Seq: seq, Session: "s-1", Epoch: 1, At: at.Add(time.Duration(seq) * time.Second), Type: typ}
	}
	note := env(2, noted)
	note.Started = &schema.Started{CallID: "c-1"}
	line := `{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"call.noted","started":{"call_id":"c-1"}}`
	bodyFirst := `{"started":{"call_id":"c-1"},"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"call.noted"}`
	unknown := func(when string) {
		t.Helper()
		if _, err := schema.EncodeEvent(note); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Errorf("%s: EncodeEvent = %v, want corrupt_history (a body on an unknown type)", when, err)
		}
		for _, l := range []string{line, bodyFirst} {
			got, err := schema.DecodeEvent([]byte(l))
			if err != nil || got.Type != noted || got.Started != nil {
				t.Errorf("%s: DecodeEvent(%s) = %+v, %v; want the envelope alone", when, l, got, err)
			}
		}
	}
	unknown("before")

	remove := schema.AddEventType(noted, "started", func(s *schema.Started, _ string) error {
		if s.CallID == "" {
			return schema.Errorf(schema.CodeCorruptHistory, "started.call_id is missing")
		}
		return nil
	})
	if b := encodeDecode(t, note); string(b) != line {
		t.Errorf("EncodeEvent:\n got %s\nwant %s", b, line)
	}
	if got, err := schema.DecodeEvent([]byte(bodyFirst)); err != nil || !reflect.DeepEqual(got, note) {
		t.Errorf("DecodeEvent(%s) = %+v, %v", bodyFirst, got, err)
	}
	if id := note.CallID(); id != "c-1" {
		t.Errorf("CallID() = %q", id)
	}
	for name, ev := range map[string]schema.Event{
		"no body": env(2, noted),
		"another body": func() schema.Event {
			e := env(2, noted)
			e.Result = &schema.Result{CallID: "c-1", Status: schema.StatusOK}
			return e
		}(),
		"two bodies": func() schema.Event { e := note; e.Fence = &schema.Fence{Epoch: 1}; return e }(),
		"its check":  func() schema.Event { e := env(2, noted); e.Started = &schema.Started{}; return e }(),
	} {
		if _, err := schema.EncodeEvent(ev); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Errorf("%s: EncodeEvent = %v, want corrupt_history", name, err)
		}
	}

	call := env(1, schema.TypeCall)
	call.Call = &schema.Call{CallID: "c-1", Tool: "t", Arguments: json.RawMessage(`{}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-1", Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "r1"}}}
	started := env(3, schema.TypeStarted)
	started.Started = &schema.Started{CallID: "c-1"}
	var jsonl bytes.Buffer
	if err := schema.WriteHistory(&jsonl, []schema.Event{call, note, started}); err != nil {
		t.Fatal(err)
	}
	events, err := schema.DecodeHistory(bytes.NewReader(jsonl.Bytes()), schema.Limits{})
	if err != nil || len(events) != 3 || !reflect.DeepEqual(events[1], note) {
		t.Fatalf("DecodeHistory = %+v, %v", events, err)
	}
	a, err := recovery.Inspect(schema.NewHistoryReader(bytes.NewReader(jsonl.Bytes()), schema.Limits{}).All(), "c-1")
	if err != nil || a.Outcome != schema.OutcomeUncertain || a.Evidence != recovery.EvidenceNoResult {
		t.Fatalf("Inspect = %+v, %v; want uncertain, no_result", a, err)
	}
	bad := note
	bad.Started = &schema.Started{}
	if _, err := recovery.Inspect(schema.Events([]schema.Event{call, bad, started}), "c-1"); schema.CodeOf(err) != schema.CodeCorruptHistory || !strings.Contains(err.Error(), "event 2 (seq 2): started.call_id is missing") {
		t.Errorf("Inspect with a %s failing its check = %v, want corrupt_history at event 2", noted, err)
	}

	remove()
	unknown("after")
	if _, err := recovery.Inspect(schema.Events([]schema.Event{call, env(2, noted), started}), "c-1"); err != nil {
		t.Errorf("Inspect with %s unknown again: %v", noted, err)
	}
}

// TestEnumsMatchSchemaFiles holds the tables to event.schema.json: its
// effect, status and stage enums list the tables' values in order, and its
// allOf has one branch per event type, requiring the type's body and
// nulling every other body.
func TestEnumsMatchSchemaFiles(t *testing.T) {
	b, err := fs.ReadFile(schema.Files(), "event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Enum []string `json:"enum"`
		} `json:"$defs"`
		AllOf []struct {
			If struct {
				Properties struct {
					Type struct {
						Const string `json:"const"`
					} `json:"type"`
				} `json:"properties"`
			} `json:"if"`
			Then struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"then"`
		} `json:"allOf"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var effects []string
	for e := effect.Effect(0); e.Valid(); e++ {
		effects = append(effects, e.String())
	}
	statuses, stages := []string{}, []string{}
	for _, s := range schema.Statuses() {
		statuses = append(statuses, string(s))
	}
	for _, s := range schema.Stages() {
		stages = append(stages, string(s))
	}
	for def, want := range map[string][]string{"effect": effects, "status": statuses, "stage": stages} {
		if got := doc.Defs[def].Enum; !slices.Equal(got, want) {
			t.Errorf("event.schema.json $defs.%s.enum = %q, the table %q", def, got, want)
		}
	}
	names, bodyOf := schema.EventTypes()
	var branches []string
	for _, br := range doc.AllOf {
		typ := br.If.Properties.Type.Const
		branches = append(branches, typ)
		own := bodyOf[typ]
		if !slices.Equal(br.Then.Required, []string{own}) {
			t.Errorf("%s: the schema requires %q, the table's body is %q", typ, br.Then.Required, own)
		}
		for _, m := range schema.BodyMembers() {
			p, ok := br.Then.Properties[m]
			switch {
			case !ok:
				t.Errorf("%s: the schema says nothing of body %s", typ, m)
			case m != own && string(bytes.Join(bytes.Fields(p), nil)) != `{"type":"null"}`:
				t.Errorf("%s: body %s is %s in the schema, want null", typ, m, p)
			}
		}
	}
	if !slices.Equal(branches, names) {
		t.Errorf("event.schema.json has branches for %q, the table declares %q", branches, names)
	}
}
