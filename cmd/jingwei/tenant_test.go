package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/service"
)

// connectTenant connects to a serve on url as the agent of tenant, with
// its key in DATA/auth/tenants/<tenant>/<agent>.nk.
func connectTenant(t *testing.T, url, data, tenant, agent string) *nats.Conn {
	t.Helper()
	kp, err := access.ReadSeedFile(access.KeyDir(filepath.Join(data, "auth")).TenantAgentSeedFile(tenant, agent))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, natsnode.NkeyOption(kp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// callVia sends a request body to jw.api.call on nc, retrying while the
// gateway registers, and returns the answer.
func callVia(t *testing.T, nc *nats.Conn, q schema.Request) *nats.Msg {
	t.Helper()
	b, _ := json.Marshal(q)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := nc.Request("jw.api.call", b, 20*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestServeTenantAgents runs the security review's reproductions against
// `jingwei serve --tenant acme --tenant beta` with tenant acme's agent
// credential, a plain NATS client: the fabricated answer (acme publishes
// its own payments.charge under beta's request id in beta's session, by
// jw.api.call and by a JetStream publish), stream info with a subjects
// filter, direct gets of beta's session, jw.api.status about beta, and
// beta's replies on _INBOX.> are all refused; beta's own call then runs
// and answers with its own result; acme's calls in its own sessions work;
// the host (an operator) still sees every session.
func TestServeTenantAgents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	url, stderr, _ := startServe(t, dir, "--tenant", "acme", "--tenant", "beta")
	// `jingwei auth tenant` adds a second agent to acme (picked up on the
	// next start; the first start's two tenants are what this test uses).
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"auth", "tenant", "--dir", filepath.Join(dir, "auth"), "--tenant", "acme", "--agent", "bot2"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "JINGWEI_TENANT_acme") {
		t.Fatalf("auth tenant: %d %s %s", code, out.String(), errb.String())
	}
	if code := run(context.Background(), []string{"auth", "tenant", "--dir", filepath.Join(dir, "auth"), "--tenant", "ac-me"}, &out, &errb); code != exitUsage {
		t.Fatalf("auth tenant with a '-' in the name: exit %d", code)
	}

	acme := connectTenant(t, url, dir, "acme", "agent")
	beta := connectTenant(t, url, dir, "beta", "agent")
	host := connectRole(t, url, dir, access.RoleHost)
	t.Cleanup(host.Close)

	// acme's own session works.
	own := schema.Request{V: 1, RequestID: "r-1", Session: "acme-1", Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A-1"}`)}
	if m := callVia(t, acme, own); service.AnswerCode(m) != "" {
		t.Fatalf("acme's own call: %s %s (%s)", service.AnswerCode(m), m.Data, stderr)
	}

	// The fabricated answer: acme claims beta's (predictable) request id
	// ahead, in beta's session, with its own charge.
	forged := schema.Request{V: 1, RequestID: "pay-1", Session: "beta-1", Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"account":"acme-account","amount_cents":500}`)}
	if m := callVia(t, acme, forged); service.AnswerCode(m) != string(schema.CodeForbidden) {
		t.Fatalf("ATTACK: acme's call in beta-1 answered %s %s", service.AnswerCode(m), m.Data)
	}
	var (
		vmu sync.Mutex
		v   []string
	)
	acme.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		vmu.Lock()
		v = append(v, err.Error())
		vmu.Unlock()
	})
	fb, _ := json.Marshal(forged)
	for _, a := range []struct{ subject, body string }{
		{"jw.requests.beta-1", string(fb)},
		{"$JS.API.STREAM.INFO.JW_EVENTS", `{"subjects_filter":">"}`},
		{"$JS.API.DIRECT.GET.JW_EVENTS", `{"multi_last":["jw.events.>"],"batch":100}`},
		{"$JS.API.DIRECT.GET.JW_EVENTS.jw.events.beta-1", ``},
		{"$JS.API.STREAM.MSG.GET.JW_EVENTS", `{"last_by_subj":"jw.events.beta-1"}`},
		{"jw.api.call.beta", string(fb)},
	} {
		if m, err := acme.Request(a.subject, []byte(a.body), 500*time.Millisecond); err == nil {
			t.Errorf("ATTACK: acme's %s answered %s", a.subject, m.Data)
		}
	}

	// acme listens on _INBOX.> while beta calls: none of beta's answers.
	spy, err := acme.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	victim := forged
	victim.Arguments = json.RawMessage(`{"account":"beta-account","amount_cents":700}`)
	m := callVia(t, beta, victim)
	var ev schema.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Type != schema.TypeResult || ev.Result.Status != schema.StatusOK || !strings.Contains(string(ev.Result.Output), "beta-account") {
		t.Fatalf("beta's own charge: %s %s", service.AnswerCode(m), m.Data)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := spy.Pending(); n != 0 {
		m, _ := spy.NextMsg(0)
		t.Fatalf("ATTACK: acme saw %d of beta's replies, e.g. %s", n, m.Data)
	}

	// Status: acme about beta is forbidden; acme's "all" holds only acme's
	// sessions; the host sees beta's call.
	status := func(nc *nats.Conn, q service.StatusRequest) (service.Status, string) {
		b, _ := json.Marshal(q)
		m, err := nc.Request("jw.api.status", b, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var st service.Status
		if c := service.AnswerCode(m); c != "" {
			return st, c
		}
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatal(err)
		}
		return st, ""
	}
	for _, q := range []service.StatusRequest{{Session: "beta-1"}, {Session: "beta-1", CallID: ev.Result.CallID}} {
		if st, code := status(acme, q); code != string(schema.CodeForbidden) {
			t.Errorf("ATTACK: acme's status about %+v: %s %+v", q, code, st)
		}
	}
	if _, code := status(acme, service.StatusRequest{}); code != "" {
		t.Fatalf("acme's status: %s", code)
	}
	if st, code := status(beta, service.StatusRequest{Session: "beta-1"}); code != "" || st.Session != "beta-1" {
		t.Fatalf("beta's own status: %s %+v", code, st)
	}
	if _, code := status(host, service.StatusRequest{Session: "beta-1", CallID: ev.Result.CallID}); code != "" {
		t.Fatalf("the host's status about beta-1: %s", code)
	}
	// The host (an operator) reads beta's log: the charge is beta's, once.
	hjs, _ := jetstream.New(host)
	topo, err := stream.OpenTopology(context.Background(), hjs, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := topo.Logs().Load(context.Background(), "beta-1")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, e := range h {
		if e.Type == schema.TypeCall {
			calls++
			if !strings.Contains(string(e.Call.Arguments), "beta-account") {
				t.Errorf("ATTACK: beta-1 holds acme's call %s", e.Call.Arguments)
			}
		}
	}
	if calls != 1 {
		t.Errorf("beta-1 holds %d calls, want 1", calls)
	}
	// `jingwei call` with the tenant's key: its own session runs, another
	// tenant's is forbidden (exit status and code).
	key := access.KeyDir(filepath.Join(dir, "auth")).TenantAgentSeedFile("acme", "agent")
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"call", "--server", url, "--nkey", key, "--session", "acme-2", "--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`, "--json"}, &out, &errb); code != exitOK {
		t.Fatalf("jingwei call as acme in acme-2: exit %d %s %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"call", "--server", url, "--nkey", key, "--session", "beta-2", "--tool", "catalog.lookup", "--args", `{"sku":"A-1"}`}, &out, &errb); code == exitOK || !strings.Contains(out.String()+errb.String(), "forbidden") {
		t.Fatalf("jingwei call as acme in beta-2: exit %d %s %s", code, out.String(), errb.String())
	}

	// `jingwei auth check` probes both tenants' agents too.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"auth", "check", "--dir", filepath.Join(dir, "auth"), "--server", url, "--roles", "agent"}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "agent (tenant acme)") || !strings.Contains(out.String(), "agent (tenant beta)") {
		t.Errorf("auth check: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	vmu.Lock()
	defer vmu.Unlock()
	if len(v) == 0 {
		t.Error("no permissions violation reported to acme")
	}
	for _, e := range v {
		if !strings.Contains(e, "Permissions Violation") {
			t.Errorf("acme's connection: %s", e)
		}
	}
}

// TestAuthCredsTenants: in operator mode `jingwei auth tenant` then `auth
// creds` sign the tenant's account and its agent's creds; `auth check
// --operator` proves the tenant's agent reaches its two services and
// nothing else; a second agent of the tenant needs only its creds (the
// server's account JWTs stay as they were).
func TestAuthCredsTenants(t *testing.T) {
	operatorSeed, ojwt, sys, sysJWT := testOperator(t)
	dir := filepath.Join(t.TempDir(), "keys")
	if st, out, errOut := runCLI("auth", "tenant", "--dir", dir, "--tenant", "acme", "--agent", "bot1"); st != exitOK || !strings.Contains(out, "acme-") {
		t.Fatalf("auth tenant: %d %s %s", st, out, errOut)
	}
	st, out, errOut := runCLI("auth", "creds", "--dir", dir, "--operator-seed", operatorSeed)
	if st != exitOK || !strings.Contains(out, "JINGWEI_TENANT_acme") || !strings.Contains(out, "agent (tenant acme)") {
		t.Fatalf("creds: exit %d\n%s\n%s", st, out, errOut)
	}
	url := operatorServer(t, dir, ojwt, sys, sysJWT)
	makeTopology(t, url, natsnode.ConnectConfig{Creds: filepath.Join(dir, "admin.creds")})
	if st, out, _ := runCLI("auth", "check", "--dir", dir, "--server", url, "--operator", "--roles", "agent"); st != exitOK || !strings.Contains(out, "agent (tenant acme)") {
		t.Fatalf("check --operator: exit %d\n%s", st, out)
	}
	// A second agent: its creds are signed by the tenant's account key;
	// the server, still running on the first account JWTs, lets it in.
	if st, _, errOut := runCLI("auth", "tenant", "--dir", dir, "--tenant", "acme", "--agent", "bot2"); st != exitOK {
		t.Fatalf("auth tenant bot2: %s", errOut)
	}
	if st, _, errOut := runCLI("auth", "creds", "--dir", dir, "--operator-seed", operatorSeed); st != exitOK {
		t.Fatalf("creds again: %s", errOut)
	}
	kd := access.KeyDir(dir)
	nc, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: url, Creds: kd.TenantAgentCredsFile("acme", "bot2")})
	if err != nil {
		t.Fatalf("bot2: %v", err)
	}
	defer nc.Close()
	if _, err := nc.Request("$JS.API.STREAM.INFO.JW_EVENTS", nil, 500*time.Millisecond); err == nil {
		t.Error("ATTACK: bot2 read JW_EVENTS' info")
	}
}
