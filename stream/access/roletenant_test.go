package access_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func TestSessionTenant(t *testing.T) {
	for _, c := range []struct{ session, tenant string }{
		{"acme-1", "acme"}, {"acme-orders-7", "acme"}, {"acme_x-1", "acme_x"},
		{"acme", ""}, {"-1", ""}, {"s1", ""}, {strings.Repeat("a", access.MaxTenantBytes+1) + "-1", ""},
	} {
		if got := access.SessionTenant(c.session); got != c.tenant {
			t.Errorf("SessionTenant(%q) = %q, want %q", c.session, got, c.tenant)
		}
	}
	if !access.TenantOwns("acme", "acme-1") || access.TenantOwns("acme", "acme_x-1") || access.TenantOwns("acme", "acmecorp-1") || access.TenantOwns("", "-1") {
		t.Error("TenantOwns")
	}
	for _, bad := range []string{"", "a-b", "a.b", "a*", strings.Repeat("a", access.MaxTenantBytes+1)} {
		if access.ValidTenant(bad) {
			t.Errorf("ValidTenant(%q)", bad)
		}
	}
	if err := (access.RoleConfig{Tenants: []access.Tenant{{Name: "a"}, {Name: "a"}}}).Validate(); err == nil {
		t.Error("a tenant twice accepted")
	}
}

// tenantServer is a role server with tenants acme and beta, one agent key
// each (stream.KeyDir.AddTenantAgent), as jingwei serve runs it.
func startTenantServer(t *testing.T) *roleServer {
	t.Helper()
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"acme", "beta"} {
		if _, err := dir.AddTenantAgent(tn, "bot1"); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := dir.Tenants()
	if err != nil {
		t.Fatal(err)
	}
	if len(tenants) != 2 || tenants[0].Name != "acme" || len(tenants[0].Agents) != 1 {
		t.Fatalf("tenants %+v", tenants)
	}
	return startRoleServerWith(t, dir, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys, Roles: access.RoleConfig{Tenants: tenants}}})
}

func (rs *roleServer) connectTenant(t *testing.T, tenant string) *nats.Conn {
	t.Helper()
	nc, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: rs.srv.ClientURL(), NKeySeedFile: rs.dir.TenantAgentSeedFile(tenant, "bot1"), Name: "test tenant " + tenant})
	if err != nil {
		t.Fatalf("connect as tenant %s: %v", tenant, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// echoService answers every request on subject (in the trusted account,
// as role) with the subject the request arrived on.
func echoService(t *testing.T, rs *roleServer, r access.Role, subject string) {
	t.Helper()
	nc := rs.connect(t, r)
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(m.Subject)) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestTenantCarriedBySubject: a tenant's agent publishes on jw.api.call
// and jw.api.status like any agent; the service receives the request on
// jw.api.call.<tenant> (jw.api.status.<tenant>), the tenant its account's
// import names, and no client can choose another: publishing another
// tenant's subject, or the operators' jw.api.call, is refused.
func TestTenantCarriedBySubject(t *testing.T) {
	rs := startTenantServer(t)
	echoService(t, rs, access.RoleWorker, "jw.api.call.*")
	echoService(t, rs, access.RoleRecoverer, "jw.api.status.*")
	echoService(t, rs, access.RoleRecoverer, "jw.api.status")
	for _, tn := range []string{"acme", "beta"} {
		nc := rs.connectTenant(t, tn)
		for _, e := range []string{"call", "status"} {
			m, err := nc.Request("jw.api."+e, []byte(`{}`), 10*time.Second)
			if err != nil {
				t.Fatalf("tenant %s: %s: %v", tn, e, err)
			}
			if want := "jw.api." + e + "." + tn; string(m.Data) != want {
				t.Fatalf("tenant %s: the service received %q, want %q", tn, m.Data, want)
			}
		}
	}
	// The operator's status is not tenant-scoped.
	host := rs.connect(t, access.RoleHost)
	if m, err := host.Request("jw.api.status", nil, 10*time.Second); err != nil || string(m.Data) != "jw.api.status" {
		t.Fatalf("host status: %v %v", err, m)
	}
	acme := rs.connectTenant(t, "acme")
	var v violations
	v.watch(acme)
	for _, s := range []string{"jw.api.call.beta", "jw.api.status.beta", "jw.api.call.acme"} {
		if m, err := acme.Request(s, []byte(`{}`), 500*time.Millisecond); err == nil {
			t.Errorf("ATTACK: tenant acme reached %s: %q", s, m.Data)
		}
		v.await(t, s)
	}
}

// TestTenantSeesNoOtherSession reproduces, with a tenant's agent
// credential, every way the agent role reads or writes another session:
// stream info with a subjects filter (lists every session id), a batched
// direct get (every session's last event), a direct get of another
// session's last event, a message get, a JetStream publish of a request
// into another session (the fabricated answer, the id claimed ahead), the
// other tenants' replies on _INBOX.>. Each is refused by the server; the
// fleet-wide agent role, which an operator keeps, still reads them.
func TestTenantSeesNoOtherSession(t *testing.T) {
	rs := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	lease, err := worker.Leases().AcquireLease(ctx, "beta-1", "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := worker.Logs().OpenLog(ctx, "beta-1", "worker-1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "payments.charge", Arguments: []byte(`{"secret":"beta"}`)}}); err != nil {
		t.Fatal(err)
	}
	echoService(t, rs, access.RoleWorker, "jw.api.call.*")

	attacks := []struct{ name, subject, body string }{
		{"stream info with subjects filter", "$JS.API.STREAM.INFO.JW_EVENTS", `{"subjects_filter":">"}`},
		{"batched direct get", "$JS.API.DIRECT.GET.JW_EVENTS", `{"multi_last":["jw.events.>"],"batch":100}`},
		{"direct get of beta's last event", "$JS.API.DIRECT.GET.JW_EVENTS.jw.events.beta-1", ``},
		{"message get", "$JS.API.STREAM.MSG.GET.JW_EVENTS", `{"last_by_subj":"jw.events.beta-1"}`},
		{"request into beta's session", "jw.requests.beta-1", `{"v":1,"request_id":"r-1","session":"beta-1","tool":"payments.charge","arguments":{}}`},
		{"account info", "$JS.API.INFO", ``},
	}
	// The fleet-wide agent role reads beta's session: what an operator's
	// credential keeps, and what a tenant's must not do.
	fleet := rs.connect(t, access.RoleAgent)
	if m, err := fleet.Request(attacks[2].subject, nil, 10*time.Second); err != nil || !strings.Contains(string(m.Data), "beta") {
		t.Fatalf("the agent role does not read beta-1 (%v): the reproduction is void", err)
	}
	acme := rs.connectTenant(t, "acme")
	var v violations
	v.watch(acme)
	for _, a := range attacks {
		m, err := acme.Request(a.subject, []byte(a.body), 500*time.Millisecond)
		if err == nil {
			t.Errorf("ATTACK %s: answered %q", a.name, m.Data)
		}
		v.await(t, a.subject)
	}
	js, _ := jetstream.New(acme)
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	if _, err := js.Stream(sctx, "JW_EVENTS"); err == nil {
		t.Error("ATTACK: tenant acme opened JW_EVENTS")
	}
	scancel()
	if st, err := worker.JS.Stream(ctx, worker.Names().StreamName("REQUESTS")); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx, jetstream.WithSubjectFilter("jw.requests.beta-1")); err != nil {
		t.Fatal(err)
	} else if info.State.Msgs != 0 {
		t.Fatalf("ATTACK: %d requests stored in beta-1", info.State.Msgs)
	}

	// Beta's replies never reach acme's inboxes.
	spy, err := acme.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	beta := rs.connectTenant(t, "beta")
	for i := 0; i < 3; i++ {
		if _, err := beta.Request("jw.api.call", []byte(`{}`), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := spy.Pending(); n != 0 {
		m, _ := spy.NextMsg(0)
		t.Fatalf("ATTACK: tenant acme saw %d of beta's replies, e.g. on %s: %s", n, m.Subject, m.Data)
	}
}

// TestTenantCredsOperatorMode: in operator mode the tenants' accounts are
// signed by the operator, each importing its own subjects under an
// activation of the trusted account, and its agents' creds are signed by
// the tenant's account: the server carries the tenant in the subject, and
// a tenant cannot reach another's subject or JetStream.
func TestTenantCredsOperatorMode(t *testing.T) {
	op := newTestOperator(t, true)
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"acme", "beta"} {
		if _, err := dir.AddTenantAgent(tn, "bot1"); err != nil {
			t.Fatal(err)
		}
	}
	tenants, err := dir.Tenants()
	if err != nil {
		t.Fatal(err)
	}
	got, err := dir.IssueRoleCreds(access.CredsConfig{Operator: op.signer, Subjects: access.RoleConfig{Tenants: tenants}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Accounts) != 6 || len(got.Users) != len(access.Roles)+2 {
		t.Fatalf("%d accounts, %d users", len(got.Accounts), len(got.Users))
	}
	for _, u := range got.Users[len(access.Roles):] {
		if u.Path != dir.TenantAgentCredsFile(u.Tenant, "bot1") || u.Account != "JINGWEI_TENANT_"+u.Tenant || mode(t, u.Path) != 0o600 {
			t.Errorf("tenant creds %+v", u)
		}
	}
	url := startOperatorServer(t, op, got.PreloadFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := func(creds string) *nats.Conn {
		t.Helper()
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, Creds: creds})
		if err != nil {
			t.Fatalf("connect %s: %v", creds, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin := conn(dir.CredsFile(access.RoleAdmin))
	js, _ := jetstream.New(admin)
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	worker := conn(dir.CredsFile(access.RoleWorker))
	if _, err := worker.Subscribe("jw.api.call.*", func(m *nats.Msg) { _ = m.Respond([]byte(m.Subject)) }); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"acme", "beta"} {
		nc := conn(dir.TenantAgentCredsFile(tn, "bot1"))
		m, err := nc.Request("jw.api.call", []byte(`{}`), 10*time.Second)
		if err != nil || string(m.Data) != "jw.api.call."+tn {
			t.Fatalf("tenant %s: %v %v", tn, err, m)
		}
	}
	acme := conn(dir.TenantAgentCredsFile("acme", "bot1"))
	var v violations
	v.watch(acme)
	probes := []string{"jw.api.call.beta", "$JS.API.STREAM.INFO.JW_EVENTS", "$JS.API.DIRECT.GET.JW_EVENTS", "jw.requests.beta-1"}
	for _, s := range probes {
		if m, err := acme.Request(s, []byte(`{}`), 500*time.Millisecond); err == nil {
			t.Errorf("ATTACK: tenant acme reached %s: %q", s, m.Data)
		}
		v.await(t, s)
	}

	// A tenant holding its own account key signs a user that may publish
	// and subscribe everything: it still reaches only its own imports.
	akp, err := access.ReadSeedFile(dir.AccountSeedFile("JINGWEI_TENANT_acme"))
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Permissions = jwt.Permissions{Pub: jwt.Permission{Allow: []string{">"}}, Sub: jwt.Permission{Allow: []string{">"}}}
	tok, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	rogue, err := nats.Connect(url, nats.UserJWTAndSeed(tok, string(useed)))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	for _, s := range append(probes, "$JS.API.DIRECT.GET.JW_EVENTS.jw.events.beta-1", "$JS.API.STREAM.MSG.GET.JW_EVENTS", "$JS.API.INFO") {
		m, err := rogue.Request(s, []byte(`{"last_by_subj":"jw.events.beta-1"}`), 500*time.Millisecond)
		if err == nil && m.Header.Get("Status") != "503" && !strings.Contains(string(m.Data), "not enabled") {
			t.Errorf("ATTACK: a user signed by acme's account key reached %s: %s %q", s, m.Header, m.Data)
		}
	}
	if m, err := rogue.Request("jw.api.call", []byte(`{}`), 10*time.Second); err != nil || string(m.Data) != "jw.api.call.acme" {
		t.Fatalf("the rogue user's call: %v %v", err, m)
	}
	// Listening on everything of its account, it sees none of beta's call.
	spy, err := rogue.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	beta := conn(dir.TenantAgentCredsFile("beta", "bot1"))
	if _, err := beta.Request("jw.api.call", []byte(`{"beta":"secret"}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	// The server's audit advisories of the rogue's own JetStream probes
	// above (its own account's, sent asynchronously) may still arrive:
	// they are acme's own traffic.
	apub, _ := akp.PublicKey()
	for m, err := spy.NextMsg(0); err == nil; m, err = spy.NextMsg(0) {
		if strings.HasPrefix(m.Subject, "$JS.EVENT.ADVISORY.") && strings.Contains(string(m.Data), `"acc":"`+apub+`"`) {
			continue
		}
		t.Errorf("ATTACK: acme's rogue user saw traffic on %s: %q", m.Subject, m.Data)
	}
}

// TestTenantRoleCheck: `jingwei auth check` covers the tenants: with
// static keys and in operator mode, each tenant's agent reaches its
// services (call, status, history) and is refused everything else.
func TestTenantRoleCheck(t *testing.T) {
	rs := startTenantServer(t)
	tenants, err := rs.dir.Tenants()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: []access.Role{access.RoleAgent}, Subjects: access.RoleConfig{Tenants: tenants}})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	n := map[string]int{}
	for _, r := range rep.Results {
		if r.Tenant != "" {
			n[r.Tenant+" "+string(r.Expect)]++
			if r.Account != "JINGWEI_TENANT_"+r.Tenant {
				t.Errorf("%s: account %s", r.Action, r.Account)
			}
		}
	}
	for _, tn := range []string{"acme", "beta"} {
		if n[tn+" "+string(access.Allowed)] != len(access.TenantEndpoints) || n[tn+" "+string(access.Refused)] < 15 {
			t.Errorf("tenant %s: probes %v", tn, n)
		}
	}
	// A tenant's agent handed the fleet-wide agent key is caught: it reads
	// JW_EVENTS, and its calls do not reach the tenant's subject.
	fleet, err := os.ReadFile(rs.dir.SeedFile(access.RoleAgent))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rs.dir.TenantAgentSeedFile("acme", "bot1"), fleet, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: []access.Role{access.RoleAgent}, Subjects: access.RoleConfig{Tenants: tenants}})
	if err != nil {
		t.Fatal(err)
	}
	caught := map[string]bool{}
	for _, f := range rep.Failures() {
		if f.Tenant != "acme" {
			t.Errorf("%s %s: %s", f.Tenant, f.Action, f.Detail)
		}
		caught[f.Action] = true
	}
	if rep.OK || !caught["stream info JW_EVENTS (subjects filter: every session id)"] || !caught["request jw.api.call (reaches jw.api.call.acme)"] {
		t.Fatalf("the fleet-wide key passed as tenant acme's: %v", caught)
	}
}

// TestTenantKeysRefused: a tenant agent's key that is a role's key, or
// another tenant's, or not a user key, is refused before any server runs
// with it (one key would carry two sets of permissions).
func TestTenantKeysRefused(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	ta, err := dir.AddTenantAgent("acme", "bot1")
	if err != nil {
		t.Fatal(err)
	}
	for name, ts := range map[string][]access.Tenant{
		"a role's key":     {{Name: "acme", Agents: []string{keys[access.RoleHost]}}},
		"two tenants' key": {{Name: "acme", Agents: []string{ta.PublicKey}}, {Name: "beta", Agents: []string{ta.PublicKey}}},
		"not a user key":   {{Name: "acme", Agents: []string{"ABADKEY"}}},
		"a bad name":       {{Name: "ac-me", Agents: []string{ta.PublicKey}}},
	} {
		if _, err := (access.RoleConfig{Tenants: ts}).AccountsBlock(keys); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	block, err := (access.RoleConfig{Tenants: []access.Tenant{{Name: "acme", Agents: []string{ta.PublicKey}}}}).AccountsBlock(keys)
	if err != nil || !strings.Contains(block, `"JINGWEI_TENANT_acme"`) || !strings.Contains(block, `to: "jw.api.call"`) || !strings.Contains(block, ta.PublicKey) {
		t.Fatalf("accounts block: %v\n%s", err, block)
	}
	for _, bad := range [][2]string{{"ac-me", "bot"}, {"acme", "bot.1"}, {"acme", ""}} {
		if _, err := dir.AddTenantAgent(bad[0], bad[1]); err == nil {
			t.Errorf("AddTenantAgent(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
