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

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestDuplicateNamesSameVerdict publishes, with a plain nats.go client, a
// session log whose third event has a duplicate member name: the result of
// call c-1 says both "ok" and "failed" (a last-wins reader would assess it
// failed → retry_allowed, a first-wins reader completed → refuse). `jingwei
// inspect` (recovery.Inspect over schema.DecodeHistory) refuses the
// history as corrupt_history, and so must the recovery worker: its
// classifier publishes no assessment of c-1 (it does assess the valid call
// after it, so it did read past the corrupt event), reports the same
// corrupt_history for that event, and its own Inspect says the same.
func TestDuplicateNamesSameVerdict(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	e.run(e.recoverer("a"))
	const session = "s-dup"
	env := func(seq int) string {
		return fmt.Sprintf(`"v":1,"seq":%d,"session":%q,"epoch":1,"at":"2026-11-30T10:00:0%dZ"`, seq, session, seq)
	}
	callEv := func(seq int, id string) string {
		return `{` + env(seq) + `,"type":"tool.call","call":{"call_id":"` + id + `","tool":"orders.create","arguments":{"sku":"A-1"},"start_marker":true,` +
			`"operation":{"task":"t-1","key":"k-` + id + `","contract":{"effect":"idempotent","revision":"v1"}}}}`
	}
	lines := []string{
		callEv(1, "c-1"),
		`{` + env(2) + `,"type":"tool.started","started":{"call_id":"c-1"}}`,
		`{` + env(3) + `,"type":"tool.result","result":{"call_id":"c-1","status":"ok","retryable":true,"status":"failed"}}`,
		callEv(4, "c-2"),
		`{` + env(5) + `,"type":"tool.started","started":{"call_id":"c-2"}}`,
		`{` + env(6) + `,"type":"tool.result","result":{"call_id":"c-2","status":"failed","retryable":true}}`,
	}
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, l := range lines {
		// A plain request to the stream's subject: the reply is the
		// stream's PubAck.
		ack, err := nc.Request(e.topo.EventsSubject(session), []byte(l), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"seq":%d`, i+1); !strings.Contains(string(ack.Data), want) {
			t.Fatalf("event %d: PubAck %s, want %s", i+1, ack.Data, want)
		}
	}

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

	// What the recovery worker does: the call after the corrupt event is
	// assessed, the corrupt call is not.
	a := as.wait(t, session, "c-2", 10*time.Second)
	if a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("c-2 assessed %+v", a)
	}
	if n := as.count(session, "c-1"); n != 0 {
		t.Fatalf("%d assessments of c-1 published from a corrupt event", n)
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
