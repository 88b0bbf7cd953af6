package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/service"
)

// TestExportTenantThroughHistory runs `jingwei serve --tenant acme
// --tenant beta` and reads session logs with real credentials: acme's
// agent, a plain NATS client, pages through its own session with
// jw.api.history and gets exactly what the host reads from the stream
// directly; beta's session is forbidden to it; the host reads both
// through the endpoint; and `jingwei export` with acme's key writes the
// same file as the host's direct export, and refuses beta's session.
func TestExportTenantThroughHistory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, stderr, _ := startServe(t, dir, "--tenant", "acme", "--tenant", "beta")
	acme := connectTenant(t, url, dir, "acme", "agent")
	beta := connectTenant(t, url, dir, "beta", "agent")
	host := connectRole(t, url, dir, access.RoleHost)
	t.Cleanup(host.Close)
	for i := range 3 {
		q := schema.Request{V: 1, RequestID: fmt.Sprintf("r-%d", i), Session: "acme-1", Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A-1"}`)}
		if m := callVia(t, acme, q); service.AnswerCode(m) != "" {
			t.Fatalf("acme's call: %s %s (%s)", service.AnswerCode(m), m.Data, stderr)
		}
		q.Session = "beta-1"
		if m := callVia(t, beta, q); service.AnswerCode(m) != "" {
			t.Fatalf("beta's call: %s %s", service.AnswerCode(m), m.Data)
		}
	}
	hjs, _ := jetstream.New(host)
	topo, err := stream.OpenTopology(context.Background(), hjs, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	direct := func(session string) string {
		h, err := topo.Logs().Load(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := schema.WriteHistory(&b, h); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	ask := func(nc *nats.Conn, q service.HistoryRequest) (service.HistoryPage, string) {
		t.Helper()
		b, _ := json.Marshal(q)
		var m *nats.Msg
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			m, err = nc.Request("jw.api.history", b, 10*time.Second)
			if err == nats.ErrNoResponders && time.Now().Before(deadline) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		var p service.HistoryPage
		if c := service.AnswerCode(m); c != "" {
			return p, c
		}
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatal(err)
		}
		return p, ""
	}
	// viaEndpoint pages through session with max events a page.
	viaEndpoint := func(nc *nats.Conn, session string, max int) (string, int) {
		t.Helper()
		var h []schema.Event
		pages := 0
		for from := uint64(0); ; {
			p, code := ask(nc, service.HistoryRequest{V: 1, Session: session, FromSeq: from, MaxEvents: max})
			if code != "" {
				t.Fatalf("%s from %d: %s", session, from, code)
			}
			pages++
			for _, se := range p.Events {
				ev, err := schema.DecodeEvent(se.Event)
				if err != nil {
					t.Fatal(err)
				}
				ev.Seq = se.Seq
				h = append(h, ev)
			}
			if p.NextSeq > p.End {
				break
			}
			from = p.NextSeq
		}
		var b bytes.Buffer
		if err := schema.WriteHistory(&b, h); err != nil {
			t.Fatal(err)
		}
		return b.String(), pages
	}
	wantA, wantB := direct("acme-1"), direct("beta-1")
	if n := strings.Count(wantA, "\n"); n < 6 {
		t.Fatalf("acme-1 holds %d events", n)
	}
	got, pages := viaEndpoint(acme, "acme-1", 2)
	if got != wantA || pages < 3 {
		t.Fatalf("acme through jw.api.history (%d pages):\n%s\nthe host's direct read:\n%s", pages, got, wantA)
	}
	for _, s := range []string{"beta-1", "host-1"} {
		if p, code := ask(acme, service.HistoryRequest{V: 1, Session: s}); code != string(schema.CodeForbidden) {
			t.Errorf("ATTACK: acme read %s: %s %d events", s, code, len(p.Events))
		}
	}
	if got, _ := viaEndpoint(host, "beta-1", 1000); got != wantB {
		t.Fatalf("the host through jw.api.history, beta-1:\n%s\nwant\n%s", got, wantB)
	}
	if got, _ := viaEndpoint(host, "acme-1", 3); got != wantA {
		t.Fatalf("the host through jw.api.history, acme-1:\n%s\nwant\n%s", got, wantA)
	}

	// `jingwei export` with acme's key: through the service (auto and
	// service), the same bytes as the host's direct export; beta's session
	// refused with its code.
	auth := access.KeyDir(filepath.Join(dir, "auth"))
	acmeKey, hostKey := auth.TenantAgentSeedFile("acme", "agent"), auth.SeedFile(access.RoleHost)
	export := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"export", "--server", url}, args...), &out, &errb); code != want {
			t.Fatalf("export %v: exit %d, want %d: %s %s", args, code, want, out.String(), errb.String())
		}
		return out.String()
	}
	hostDirect := export(exitOK, "--nkey", hostKey, "--via", "direct", "--session", "acme-1")
	if hostDirect != wantA {
		t.Fatalf("the host's direct export:\n%s\nwant\n%s", hostDirect, wantA)
	}
	for _, via := range []string{"auto", "service"} {
		if got := export(exitOK, "--nkey", acmeKey, "--via", via, "--session", "acme-1"); got != hostDirect {
			t.Fatalf("acme's export --via %s:\n%s\nthe host's:\n%s", via, got, hostDirect)
		}
	}
	if got := export(exitRefused, "--nkey", acmeKey, "--session", "beta-1"); !strings.Contains(got, string(schema.CodeForbidden)) || strings.Contains(got, "catalog.lookup") {
		t.Fatalf("ATTACK: acme's export of beta-1: %s", got)
	}
	if got := export(exitOK, "--nkey", hostKey, "--session", "beta-1"); got != wantB {
		t.Fatalf("the host's export of beta-1 (auto):\n%s", got)
	}
	export(exitUsage, "--nkey", hostKey, "--via", "jetstream", "--session", "beta-1")
}
