package recoverer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// askHistory sends a jw.api.history body on subject (retrying while the
// service registers) and returns the page, or the error code.
func askHistory(t *testing.T, nc *nats.Conn, subject string, body any) (service.HistoryPage, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	var m *nats.Msg
	var err error
	streamtest.Eventually(t, 10*time.Second, "service answers", func() bool {
		m, err = nc.Request(subject, b, 5*time.Second)
		return err != nats.ErrNoResponders
	})
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var p service.HistoryPage
	if code := service.AnswerCode(m); code != "" {
		return p, code
	}
	if err := json.Unmarshal(m.Data, &p); err != nil {
		t.Fatalf("%s: %s", subject, m.Data)
	}
	return p, ""
}

// readAll pages through session's log on subject, max events a page, and
// returns every stored event and how many pages it took.
func readAll(t *testing.T, nc *nats.Conn, subject, session string, max int) ([]service.StoredEvent, int) {
	t.Helper()
	var out []service.StoredEvent
	from := uint64(0)
	for pages := 1; ; pages++ {
		p, code := askHistory(t, nc, subject, service.HistoryRequest{V: 1, Session: session, FromSeq: from, MaxEvents: max})
		if code != "" {
			t.Fatalf("%s %s from %d: %s", subject, session, from, code)
		}
		if len(p.Events) > max || p.Session != session {
			t.Fatalf("page of %d events (max %d), session %q", len(p.Events), max, p.Session)
		}
		out = append(out, p.Events...)
		if p.NextSeq > p.End {
			return out, pages
		}
		if len(p.Events) == 0 || p.NextSeq <= from {
			t.Fatalf("page from %d makes no progress: %+v", from, p)
		}
		from = p.NextSeq
	}
}

// TestHistoryTenantScoped: jw.api.history.<tenant> (a tenant agent's
// jw.api.history, through its account's import) pages through the
// tenant's own session, interleaved on the stream with another tenant's,
// and returns every event as stored, in order, with its seq — exactly
// what the stream holds (compared byte for byte with the admin's direct
// read, an argument with <, > and & included); another tenant's session
// or one of no tenant is forbidden; the operators' jw.api.history reads
// both.
func TestHistoryTenantScoped(t *testing.T) {
	e := setup(t, 0)
	e.run(e.recoverer("a"))
	a, b := e.writer("acme-1", "w1"), e.writer("beta-1", "w2")
	for i := range 8 {
		id := fmt.Sprintf("c-%d", i)
		a.append(schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "orders.create", Arguments: json.RawMessage(`{"q":"<a&b>"}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "k-" + id, Contract: effect.Contract{Effect: effect.Idempotent, Revision: "v1"}}}})
		b.call(id, "payments.charge", effect.NonIdempotent, "k-"+id)
		a.started(id)
		a.result(id, schema.StatusOK, "")
	}
	// What the admin reads directly: the stored bytes.
	stored := func(session string) []service.StoredEvent {
		var out []service.StoredEvent
		if _, err := e.topo.Logs().ReadLog(context.Background(), session, 0, func(seq uint64, data []byte) bool {
			out = append(out, service.StoredEvent{Seq: seq, Event: bytes.Clone(data)})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	same := func(what string, got, want []service.StoredEvent) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Event, want[i].Event) {
				t.Fatalf("%s: event %d: seq %d %s, want seq %d %s", what, i, got[i].Seq, got[i].Event, want[i].Seq, want[i].Event)
			}
		}
	}
	wantA, wantB := stored("acme-1"), stored("beta-1")
	if len(wantA) != 24 || !bytes.Contains(wantA[0].Event, []byte(`<a&b>`)) {
		t.Fatalf("acme-1 holds %d events: %s", len(wantA), wantA[0].Event)
	}
	got, pages := readAll(t, e.nc, "jw.api.history.acme", "acme-1", 7)
	same("tenant acme, acme-1", got, wantA)
	if pages != 4 {
		t.Errorf("24 events 7 a page: %d pages", pages)
	}
	for _, ev := range got {
		if _, err := schema.DecodeEvent(ev.Event); err != nil {
			t.Fatalf("seq %d does not decode: %v", ev.Seq, err)
		}
	}
	// A page from the middle, and one past the end.
	if p, code := askHistory(t, e.nc, "jw.api.history.acme", service.HistoryRequest{V: 1, Session: "acme-1", FromSeq: wantA[3].Seq, MaxEvents: 2}); code != "" || len(p.Events) != 2 || p.Events[0].Seq != wantA[3].Seq || p.NextSeq != wantA[4].Seq+1 || p.End != wantA[23].Seq {
		t.Fatalf("page from %d: %s %+v", wantA[3].Seq, code, p)
	}
	if p, code := askHistory(t, e.nc, "jw.api.history.acme", service.HistoryRequest{V: 1, Session: "acme-1", FromSeq: wantA[23].Seq + 1}); code != "" || len(p.Events) != 0 || p.NextSeq <= p.End {
		t.Fatalf("page past the end: %s %+v", code, p)
	}
	if p, code := askHistory(t, e.nc, "jw.api.history.acme", service.HistoryRequest{V: 1, Session: "acme-9"}); code != "" || len(p.Events) != 0 || p.End != 0 || p.NextSeq != 1 {
		t.Fatalf("unknown session of acme: %s %+v", code, p)
	}

	for _, s := range []string{"beta-1", "s-1", "acme_x-1", "acme"} {
		if p, code := askHistory(t, e.nc, "jw.api.history.acme", service.HistoryRequest{V: 1, Session: s}); code != string(schema.CodeForbidden) {
			t.Errorf("ATTACK: tenant acme read %s: %s %d events", s, code, len(p.Events))
		}
	}
	if _, code := askHistory(t, e.nc, "jw.api.history.a-b", service.HistoryRequest{V: 1, Session: "a-1"}); code != string(schema.CodeForbidden) {
		t.Errorf("jw.api.history.a-b: %s", code)
	}
	got, _ = readAll(t, e.nc, "jw.api.history.beta", "beta-1", 1000)
	same("tenant beta, beta-1", got, wantB)

	// The operators read every session.
	got, _ = readAll(t, e.nc, "jw.api.history", "acme-1", 10)
	same("operator, acme-1", got, wantA)
	got, _ = readAll(t, e.nc, "jw.api.history", "beta-1", 3)
	same("operator, beta-1", got, wantB)
}

// TestHistoryBadRequests: bodies the service refuses before reading.
func TestHistoryBadRequests(t *testing.T) {
	e := setup(t, 0)
	e.run(e.recoverer("a"))
	e.writer("acme-1", "w1").call("c-1", "orders.create", effect.Idempotent, "k-1")
	for _, body := range []string{
		`{"session":"acme-1"}`,
		`{"v":2,"session":"acme-1"}`,
		`{"v":1}`,
		`{"v":1,"session":"a.b"}`,
		`{"v":1,"session":"acme-1","max_events":-1}`,
		`{"v":1,"session":"acme-1","max_events":10001}`,
		`{"v":1,"session":"acme-1","from_seq":-1}`,
		`{"v":1,"session":"acme-1","session":"beta-1"}`,
		``,
	} {
		if _, code := askHistory(t, e.nc, "jw.api.history", json.RawMessage(body)); code != string(schema.CodeBadRequest) {
			t.Errorf("%s: %s, want bad_request", body, code)
		}
	}
}

// TestHistoryPageBytes: a page holds no more bytes of events than its
// budget, and always at least one event an answer can carry; an event
// larger than any answer is history_too_large, never a page without
// progress.
func TestHistoryPageBytes(t *testing.T) {
	e := setup(t, 0)
	w := e.writer("s-1", "w1")
	big := json.RawMessage(`{"pad":"` + string(bytes.Repeat([]byte("x"), 3000)) + `"}`)
	for i := range 10 {
		w.append(schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: fmt.Sprintf("c-%d", i), Tool: "x", Arguments: big}})
	}
	ctx := context.Background()
	req := service.HistoryRequest{V: 1, Session: "s-1", MaxEvents: 1000}
	var all int
	for from := uint64(0); ; {
		req.FromSeq = from
		p, err := historyPage(ctx, e.topo, req, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		body, err := encodeHistoryPage(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 || len(p.Events) > 3 || len(body) > 10_000+historySlack {
			t.Fatalf("page from %d: %d events, %d bytes", from, len(p.Events), len(body))
		}
		all += len(p.Events)
		if p.NextSeq > p.End {
			break
		}
		from = p.NextSeq
	}
	if all != 10 {
		t.Fatalf("%d events read", all)
	}
	req.FromSeq = 0
	if _, err := historyPage(ctx, e.topo, req, 1000); schema.CodeOf(err) != schema.CodeHistoryTooLarge {
		t.Fatalf("an event over the budget: %v", err)
	}
}

// TestHistoryCorruptEvent: an event that does not decode is answered
// corrupt_history naming its seq, not passed on.
func TestHistoryCorruptEvent(t *testing.T) {
	e := setup(t, 0)
	e.writer("s-1", "w1").call("c-1", "orders.create", effect.Idempotent, "k-1")
	ack, err := e.topo.JS.Publish(context.Background(), "jw.events.s-1", []byte(`{"v":1,"nope`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = historyPage(context.Background(), e.topo, service.HistoryRequest{V: 1, Session: "s-1", MaxEvents: 10}, 1<<20)
	if schema.CodeOf(err) != schema.CodeCorruptHistory || !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprintf("seq %d", ack.Sequence))) {
		t.Fatalf("corrupt event: %v", err)
	}
}
