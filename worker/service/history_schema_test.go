package service_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema/schematest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestHistorySchemas validates the history request and page the Go types
// encode against historyrequest.schema.json and historypage.schema.json,
// checks the endpoint's metadata, and that the schemas refuse what the
// service refuses.
func TestHistorySchemas(t *testing.T) {
	s := schematest.Schemas(t)
	ev := json.RawMessage(`{"v":1,"session":"acme-1","epoch":1,"at":"2026-12-02T01:54:28.503Z","type":"tool.started","started":{"call_id":"c-0"}}`)
	good := []struct {
		file string
		v    any
	}{
		{"historyrequest.schema.json", service.HistoryRequest{V: 1, Session: "acme-1"}},
		{"historyrequest.schema.json", service.HistoryRequest{V: 1, Session: "acme-1", FromSeq: 7, MaxEvents: service.MaxHistoryEvents}},
		{"historypage.schema.json", service.HistoryPage{Session: "acme-1", Events: []service.StoredEvent{}, NextSeq: 1}},
		{"historypage.schema.json", service.HistoryPage{Session: "acme-1", Events: []service.StoredEvent{{Seq: 3, Event: ev}}, NextSeq: 4, End: 9}},
	}
	for _, g := range good {
		b, err := json.Marshal(g.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(t, s[g.file], b); err != nil {
			t.Errorf("%s refuses %s: %v", g.file, b, err)
		}
	}
	bad := []struct{ file, doc string }{
		{"historyrequest.schema.json", `{"session":"acme-1"}`},
		{"historyrequest.schema.json", `{"v":2,"session":"acme-1"}`},
		{"historyrequest.schema.json", `{"v":1}`},
		{"historyrequest.schema.json", `{"v":1,"session":"a.b"}`},
		{"historyrequest.schema.json", `{"v":1,"session":"acme-1","max_events":10001}`},
		{"historyrequest.schema.json", `{"v":1,"session":"acme-1","max_events":-1}`},
		{"historyrequest.schema.json", `{"v":1,"session":"acme-1","from_seq":-1}`},
		{"historypage.schema.json", `{"session":"acme-1","events":[],"next_seq":1}`},
		{"historypage.schema.json", `{"session":"acme-1","events":[{"seq":1}],"next_seq":2,"end":1}`},
		{"historypage.schema.json", `{"session":"acme-1","events":[{"seq":1,"event":{"v":1}}],"next_seq":2,"end":1}`},
	}
	for _, b := range bad {
		if err := check(t, s[b.file], []byte(b.doc)); err == nil {
			t.Errorf("%s accepts %s", b.file, b.doc)
		}
	}
	for k, f := range service.EndpointMetadata(service.EndpointHistory) {
		if s[f] == nil || !strings.HasSuffix(f, ".schema.json") {
			t.Errorf("endpoint history metadata %s=%s names no schema file", k, f)
		}
	}
	if !service.TenantScoped(service.EndpointHistory) {
		t.Error("history is not tenant-scoped")
	}
}
