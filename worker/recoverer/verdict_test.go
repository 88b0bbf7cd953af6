package recoverer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestDuplicateNamesSameVerdict publishes, with a plain nats.go client, a
// session log whose third event has a duplicate member name: the result of
// call c-1 says both "ok" and "failed" (a last-wins reader would assess it
// failed → retry_allowed, a first-wins reader completed → refuse), and a
// valid finished call c-2 follows. `jingwei inspect` (recovery.Inspect
// over schema.DecodeHistory) refuses that history as corrupt_history, for
// every call of it; so must the recovery worker: its classifier refuses
// the event with the same error and publishes no assessment of the
// session (neither of c-1, nor of c-2 after it, nor when a takeover
// fences the session), while it still assesses a valid session published
// after it; and its own Inspect says corrupt_history too.
func TestDuplicateNamesSameVerdict(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	rec := e.recoverer("a")
	e.run(rec)
	const session = "s-dup"
	env := func(session string, seq int) string {
		return fmt.Sprintf(`"v":1,"seq":%d,"session":%q,"epoch":1,"at":"2026-11-30T10:00:0%dZ"`, seq, session, seq)
	}
	callEv := func(session string, seq int, id string) string {
		return `{` + env(session, seq) + `,"type":"tool.call","call":{"call_id":"` + id + `","tool":"orders.create","arguments":{"sku":"A-1"},"start_marker":true,` +
			`"operation":{"task":"t-1","key":"k-` + id + `","contract":{"effect":"idempotent","revision":"v1"}}}}`
	}
	finished := func(session string, seq int, id string) []string {
		return []string{
			callEv(session, seq, id),
			`{` + env(session, seq+1) + `,"type":"tool.started","started":{"call_id":"` + id + `"}}`,
			`{` + env(session, seq+2) + `,"type":"tool.result","result":{"call_id":"` + id + `","status":"failed","retryable":true}}`,
		}
	}
	lines := append([]string{
		callEv(session, 1, "c-1"),
		`{` + env(session, 2) + `,"type":"tool.started","started":{"call_id":"c-1"}}`,
		`{` + env(session, 3) + `,"type":"tool.result","result":{"call_id":"c-1","status":"ok","retryable":true,"status":"failed"}}`,
	}, finished(session, 4, "c-2")...)
	control := finished("s-ok", 1, "c-9")
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publish := func(session string, lines []string) {
		for i, l := range lines {
			// A plain request to the stream's subject: the reply is the
			// stream's PubAck.
			ack, err := nc.Request(e.topo.Names().EventsSubject(session), []byte(l), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(ack.Data), `"stream"`) || strings.Contains(string(ack.Data), `"error"`) {
				t.Fatalf("%s event %d: PubAck %s", session, i+1, ack.Data)
			}
		}
	}
	publish(session, lines)
	publish("s-ok", control)

	// What `jingwei inspect` sees.
	jsonl := []byte(strings.Join(lines, "\n") + "\n")
	_, inspectErr := recovery.Inspect(schema.NewHistoryReader(bytes.NewReader(jsonl), schema.Limits{}).All(), "c-1")
	_, decodeErr := schema.DecodeHistory(bytes.NewReader(jsonl), schema.Limits{})
	for _, err := range []error{inspectErr, decodeErr} {
		if !errors.Is(err, schema.ErrCorruptHistory) || !strings.Contains(err.Error(), `line 3: event is not valid: invalid JSON at byte`) ||
			!strings.Contains(err.Error(), `duplicate member name "status"`) {
			t.Fatalf("inspect over DecodeHistory: %v, want corrupt_history naming line 3 and the duplicate", err)
		}
	}

	// What the recovery worker does. The classifier reads the log in
	// order: once the control session's assessment is out, everything of
	// s-dup has been classified and would have been published before it.
	if a := as.wait(t, "s-ok", "c-9", 10*time.Second); a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("control call assessed %+v", a)
	}
	for _, id := range []string{"c-1", "c-2"} {
		if n := as.count(session, id); n != 0 {
			t.Fatalf("%d assessments of %s published from a corrupt history", n, id)
		}
	}
	if _, err := recovery.Inspect(schema.NewHistoryReader(bytes.NewReader(jsonl), schema.Limits{}).All(), "c-2"); !errors.Is(err, schema.ErrCorruptHistory) {
		t.Fatalf("inspect c-2: %v, want corrupt_history (the whole history is)", err)
	}
	// The classifier's verdict on the event itself is the reader's, minus
	// the line.
	_, classErr := newTracker().observe(session, 3, []byte(lines[2]), nil)
	if !errors.Is(classErr, schema.ErrCorruptHistory) || "line 3: "+classErr.(*schema.Error).Message != decodeErr.(*schema.Error).Message {
		t.Fatalf("classifier: %v; DecodeHistory: %v", classErr, decodeErr)
	}
	// And the worker's own Inspect (jw.api.inspect) loads the log and
	// refuses it the same way.
	r := e.recoverer("b")
	if _, err := r.Inspect(context.Background(), session, "c-1"); !errors.Is(err, schema.ErrCorruptHistory) {
		t.Fatalf("recoverer Inspect: %v, want corrupt_history", err)
	}
}

// TestContractWithoutEffectIsUnknown: an operation whose contract names no
// effect is effect unknown (docs/protocol.md §9), not a corrupt event, for the
// classifier and for Inspect alike, so an uncertain attempt of it needs a
// review.
func TestContractWithoutEffectIsUnknown(t *testing.T) {
	lines := []string{
		`{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-30T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"k-1","contract":{"revision":"v1"}}}}`,
		`{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-30T10:00:02Z","type":"tool.started","started":{"call_id":"c-1"}}`,
		`{"v":1,"seq":3,"session":"s-1","epoch":1,"at":"2026-11-30T10:00:03Z","type":"tool.result","result":{"call_id":"c-1","status":"timeout","retryable":true}}`,
	}
	tr := newTracker()
	var found []finding
	for i, l := range lines {
		var err error
		if found, err = tr.observe("s-1", uint64(i+1), []byte(l), found[:0]); err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
	}
	if len(found) != 1 || !found[0].ready {
		t.Fatalf("classifier found %+v", found)
	}
	want, err := recovery.Inspect(schema.NewHistoryReader(strings.NewReader(strings.Join(lines, "\n")), schema.Limits{}).All(), "c-1")
	if err != nil {
		t.Fatal(err)
	}
	got := found[0].a
	if got.Contract.Effect != effect.Unknown || got.Outcome != schema.OutcomeUncertain || got.Decision != schema.DecisionNeedsReview {
		t.Fatalf("classifier assessed %+v", got)
	}
	assertSame(t, got, want)
}

// TestStaleEpochSameVerdict: a result stamped with the epoch of a writer
// that was fenced, appended after the fence (only a client bypassing the
// log's protocol can put it there), makes the history corrupt_history for
// Inspect; the classifier agrees: it assessed the call once, when the
// fence closed it (uncertain, no result), and never as completed from the
// stale result, and nothing after it in that session is assessed. An
// event of another session on the subject is refused the same way.
func TestStaleEpochSameVerdict(t *testing.T) {
	ev := func(seq int, epoch uint64, body string) string {
		return fmt.Sprintf(`{"v":1,"seq":%d,"session":"s-1","epoch":%d,"at":"2026-11-30T10:00:0%dZ",%s}`, seq, epoch, seq, body)
	}
	lines := []string{
		ev(1, 1, `"type":"tool.call","call":{"call_id":"c-1","tool":"payments.charge","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"k-1","contract":{"effect":"non_idempotent","revision":"v1"}}}`),
		ev(2, 1, `"type":"tool.started","started":{"call_id":"c-1"}`),
		ev(3, 2, `"type":"session.fenced","fence":{"epoch":2,"owner":"recoverer-a"}`),
		ev(4, 1, `"type":"tool.result","result":{"call_id":"c-1","status":"ok","retryable":false,"output":{"charged":true}}`),
		ev(5, 2, `"type":"tool.call","call":{"call_id":"c-2","tool":"payments.charge","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"k-2","contract":{"effect":"non_idempotent","revision":"v1"}}}`),
		ev(6, 2, `"type":"tool.result","result":{"call_id":"c-2","status":"failed","retryable":false}`),
	}
	jsonl := strings.Join(lines, "\n") + "\n"
	for _, id := range []string{"c-1", "c-2"} {
		if _, err := recovery.Inspect(schema.NewHistoryReader(strings.NewReader(jsonl), schema.Limits{}).All(), id); !errors.Is(err, schema.ErrCorruptHistory) {
			t.Fatalf("Inspect %s: %v, want corrupt_history", id, err)
		}
	}
	tr := newTracker()
	var all []finding
	var errs []error
	for i, l := range lines {
		found, err := tr.observe("s-1", uint64(i+1), []byte(l), nil)
		all = append(all, found...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(all) != 1 || !all[0].ready || all[0].callID != "c-1" || all[0].a.Outcome != schema.OutcomeUncertain || all[0].a.Evidence != recovery.EvidenceNoResult {
		t.Fatalf("classifier found %+v, want one assessment of c-1: uncertain, no result", all)
	}
	if len(errs) != 1 || !errors.Is(errs[0], schema.ErrCorruptHistory) || !strings.Contains(errs[0].Error(), "epoch 1") {
		t.Fatalf("classifier errors %v, want one corrupt_history at the stale result", errs)
	}

	other := newTracker()
	if _, err := other.observe("s-2", 1, []byte(lines[0]), nil); !errors.Is(err, schema.ErrCorruptHistory) {
		t.Fatalf("an event of s-1 on s-2's subject: %v, want corrupt_history", err)
	}
}
