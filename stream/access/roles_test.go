package access_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// roleServer is an embedded server that enforces the roles, with the
// topology created by admin.
type roleServer struct {
	srv   *natsnode.Embedded
	dir   access.KeyDir
	admin *nats.Conn
	topo  *stream.Topology // admin's
}

func startRoleServer(t *testing.T) *roleServer {
	t.Helper()
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	return startRoleServerWith(t, dir, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}})
}

func startRoleServerWith(t *testing.T, dir access.KeyDir, cfg natsnode.EmbeddedConfig) *roleServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Dir, cfg.Listen, cfg.Sync = t.TempDir(), "127.0.0.1:-1", natsnode.SyncInterval
	e, err := natsnode.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	rs := &roleServer{srv: e, dir: dir}
	rs.admin = rs.connect(t, access.RoleAdmin)
	js, _ := jetstream.New(rs.admin)
	if rs.topo, err = stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	return rs
}

// connect connects as role with its nkey seed file, as a client would.
func (rs *roleServer) connect(t *testing.T, r access.Role) *nats.Conn {
	t.Helper()
	nc, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: rs.srv.ClientURL(), NKeySeedFile: rs.dir.SeedFile(r), Name: "test " + string(r)})
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func checkOK(t *testing.T, rep *access.CheckReport) {
	t.Helper()
	for _, f := range rep.Failures() {
		t.Errorf("%-9s %-55s expect %-7s got %-7s %s", f.Role, f.Action, f.Expect, f.Got, f.Detail)
	}
}

// TestRolesCheckEmbedded runs every probe for every role against an
// embedded server with authorization on: each role's allowed actions work
// and its forbidden ones are refused by the server.
func TestRolesCheckEmbedded(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	if !rep.OK {
		t.Fatal("report not OK")
	}
	// Every role ran every probe, and each expected refusals and allowances.
	per := map[access.Role]map[access.Outcome]int{}
	for _, r := range rep.Results {
		if per[r.Role] == nil {
			per[r.Role] = map[access.Outcome]int{}
		}
		per[r.Role][r.Expect]++
	}
	for _, r := range access.Roles {
		if per[r][access.Allowed] == 0 {
			t.Errorf("%s: no allowed probes", r)
		}
		if r != access.RoleAdmin && per[r][access.Refused] < 20 {
			t.Errorf("%s: only %d refused probes", r, per[r][access.Refused])
		}
	}
}

// TestRolesCheckCoversTheAttacks: the checker's probes include every attack
// the roles defend against, for every untrusted role, and report how the
// server refused each: a permissions violation inside the role's account,
// or the account boundary (an injected reply subject answered in the
// role's own account, other accounts' replies unseen).
func TestRolesCheckCoversTheAttacks(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	untrusted := []access.Role{access.RoleAgent, access.RoleReviewer, access.RoleHost}
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: untrusted})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	p := access.DefaultProbeSession
	byPermission := []string{
		"publish jw.events." + p + " (JetStream)", "publish jw.plans." + p + " (JetStream)",
		"publish jw.assessments." + p + " (JetStream)",
		"publish _INBOX.<other client> (forged reply)", "publish _R_.<import reply> (forged reply)",
		"KV write jw_plans", "KV write jw_leases", "KV write jw_budget",
		"stream delete JW_EVENTS", "stream purge JW_EVENTS", "stream update JW_EVENTS",
		"stream delete JW_REVIEWS", "stream purge JW_REVIEWS", "stream update JW_REVIEWS",
		"stream delete KV_jw_plans", "stream purge KV_jw_leases", "stream update KV_jw_budget",
		"message delete JW_REVIEWS",
		"consumer on JW_REQUESTS", "consumer on JW_PLANS", "consumer on JW_EVENTS", "consumer on JW_REVIEWS",
		"ack on JW_REQUESTS", "ack on JW_PLANS (with domain)",
		"subscribe jw.api.>", "subscribe $SRV.>", "subscribe jw.events.> (core)",
		"KV get jw_budget", "KV get jw_leases", "stream info TOOLS_LEDGER",
	}
	byAccount := []string{
		"see another account's replies (subscribe _INBOX.>)",
		"answer lands in another account (injected reply subject)",
	}
	have := map[string]access.CheckResult{}
	for _, r := range rep.Results {
		have[string(r.Role)+" "+r.Action] = r
	}
	for _, role := range untrusted {
		for _, a := range append(byPermission, byAccount...) {
			r, ok := have[string(role)+" "+a]
			if !ok {
				t.Errorf("%s: no probe %q", role, a)
				continue
			}
			want, text := access.RefusedPermission, "Permissions Violation"
			if slices.Contains(byAccount, a) {
				want, text = access.RefusedIsolated, "account"
			}
			if r.Expect != access.Refused || r.Got != access.Refused || r.RefusedBy != want || !strings.Contains(r.Detail, text) {
				t.Errorf("%s %q: expect %s got %s by %q (%s); want refused by %s", role, a, r.Expect, r.Got, r.RefusedBy, r.Detail, want)
			}
			if r.Account != "JINGWEI_"+strings.ToUpper(string(role)) {
				t.Errorf("%s: account %q", role, r.Account)
			}
		}
	}
}

// TestRolesCheckCatchesWrongPermissions runs the check against the old
// single-account setup (every role's user in the trusted account, with
// admin's rights), as a misconfigured live deployment would be: the check
// reports every refusal that did not happen, the reply-subject injection
// and the snooping included, and its probes change nothing on the server.
func TestRolesCheckCatchesWrongPermissions(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	rs := startRoleServerWith(t, dir, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}, Options: oneAccount})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := serverState(t, ctx, rs)
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatal("report OK with every permission granted")
	}
	bad := map[string]bool{}
	for _, f := range rep.Failures() {
		if f.Expect != access.Refused || f.Got != access.Allowed {
			t.Errorf("%s %s: expect %s got %s (%s)", f.Role, f.Action, f.Expect, f.Got, f.Detail)
		}
		if strings.Contains(f.Detail, "STORED") {
			t.Errorf("%s %s stored a message: %s", f.Role, f.Action, f.Detail)
		}
		bad[string(f.Role)+" "+f.Action] = true
	}
	for _, k := range []string{
		"agent publish jw.events." + access.DefaultProbeSession + " (JetStream)",
		"agent stream delete JW_EVENTS", "host KV write jw_plans", "reviewer consumer on JW_REQUESTS",
		"worker stream purge TOOLS_LEDGER", "recoverer publish jw.reviews." + access.DefaultProbeSession + " (JetStream)",
		"worker subscribe jw.api.>", "agent publish _INBOX.<other client> (forged reply)",
		"agent answer lands in another account (injected reply subject)",
		"agent see another account's replies (subscribe _INBOX.>)",
		"host answer lands in another account (injected reply subject)",
		"worker see another account's replies (subscribe _INBOX.>)",
	} {
		if !bad[k] {
			t.Errorf("not reported: %s", k)
		}
	}
	after := serverState(t, ctx, rs)
	if before != after {
		t.Errorf("the probes changed the server:\nbefore %s\nafter  %s", before, after)
	}
}

// oneAccount moves every user into the trusted account with full rights:
// the setup before accounts, misconfigured.
func oneAccount(o *server.Options) {
	var trusted *server.Account
	for _, a := range o.Accounts {
		if a.Name == access.DefaultAccount {
			trusted = a
		}
	}
	for _, u := range o.Nkeys {
		u.Account, u.Permissions = trusted, nil
	}
}

// TestRolesCheckAccountsAlone: with the accounts in place but every user
// given full rights inside its account, the accounts alone keep the
// untrusted roles out of everything they do not import: the check reports
// those refusals as "not imported" (no responders, and nothing reached the
// trusted account), and the isolation probes still pass. What it flags are
// the permissions the users should have had.
func TestRolesCheckAccountsAlone(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	rs := startRoleServerWith(t, dir, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}, Options: func(o *server.Options) {
		for _, u := range o.Nkeys {
			if u.Account.Name != access.DefaultAccount {
				u.Permissions = nil
			}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := serverState(t, ctx, rs)
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: []access.Role{access.RoleAgent, access.RoleHost}})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]access.CheckResult{}
	for _, r := range rep.Results {
		have[string(r.Role)+" "+r.Action] = r
	}
	p := access.DefaultProbeSession
	for _, a := range []string{
		"agent publish jw.events." + p + " (JetStream)", "agent KV write jw_budget", "agent stream delete JW_EVENTS",
		"agent consumer on JW_REQUESTS", "agent request jw.api.prepare", "agent message get JW_PLANS",
		"agent ack on JW_REQUESTS", "agent publish _INBOX.<other client> (forged reply)",
		"host publish jw.requests." + p + " (JetStream)", "host KV write jw_plans", "host KV get jw_budget",
		"host request jw.api.call", "host stream purge KV_jw_plans",
	} {
		r := have[a]
		if r.Got != access.Refused || r.RefusedBy != access.RefusedNotImported || !r.OK {
			t.Errorf("%s: got %s by %q ok=%v (%s); want refused, not imported", a, r.Got, r.RefusedBy, r.OK, r.Detail)
		}
	}
	for _, a := range []string{"agent answer lands in another account (injected reply subject)", "host see another account's replies (subscribe _INBOX.>)"} {
		if r := have[a]; r.Got != access.Refused || r.RefusedBy != access.RefusedIsolated {
			t.Errorf("%s: got %s by %q (%s)", a, r.Got, r.RefusedBy, r.Detail)
		}
	}
	// What the permissions alone refused: a subscription is judged by them.
	if r := have["agent subscribe jw.events.> (core)"]; r.OK || r.Got != access.Allowed {
		t.Errorf("agent's core subscription: %+v", r)
	}
	// The imports still work.
	for _, a := range []string{"agent publish jw.requests." + p + " (JetStream)", "host request $SRV.PING (nats micro ls)", "host KV get jw_plans"} {
		if r := have[a]; r.Got != access.Allowed || !r.OK {
			t.Errorf("%s: %+v", a, r)
		}
	}
	if after := serverState(t, ctx, rs); before != after {
		t.Errorf("the probes changed the server:\nbefore %s\nafter  %s", before, after)
	}
}

// TestRolesCheckWithoutWitness: without admin's credentials the check
// cannot tell "not imported" from "imported, nothing answering" and says
// so instead of guessing.
func TestRolesCheckWithoutWitness(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	rs := startRoleServerWith(t, dir, natsnode.EmbeddedConfig{Auth: access.Users{Keys: keys}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.Remove(dir.SeedFile(access.RoleAdmin)); err != nil {
		t.Fatal(err)
	}
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: []access.Role{access.RoleAgent}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		switch r.Action {
		case "request jw.api.call": // imported, no recoverer running: no responders
			if r.OK || r.Got != access.Failed || !strings.Contains(r.Detail, "witness") {
				t.Errorf("%s: %+v", r.Action, r)
			}
		case "answer lands in another account (injected reply subject)", "see another account's replies (subscribe _INBOX.>)":
			if r.Got != access.Skipped && r.Got != access.Refused {
				t.Errorf("%s: %+v", r.Action, r)
			}
		}
	}
}

// serverState summarizes every stream: name, config subjects, messages,
// last sequence, consumers.
func serverState(t *testing.T, ctx context.Context, rs *roleServer) string {
	t.Helper()
	js, _ := jetstream.New(rs.admin)
	var out []string
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		out = append(out, fmt.Sprintf("%s subj=%v msgs=%d last=%d consumers=%d deny_delete=%v", si.Config.Name, si.Config.Subjects, si.State.Msgs, si.State.LastSeq, si.State.Consumers, si.Config.DenyDelete))
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// TestRoleTables checks the tables themselves: every entry says why, only
// admin has wildcard rights, the worker and the recoverer carry the guards
// they do not own, the recoverer alone answers requests, the untrusted
// roles may publish exactly what their accounts import, and the server and
// JWT forms hold the same lists.
func TestRoleTables(t *testing.T) {
	rc := access.RoleConfig{}
	for _, r := range access.Roles {
		for _, g := range rc.Grants(r) {
			if g.Why == "" || len(g.Subjects) == 0 {
				t.Errorf("%s: grant without reason or subjects: %+v", r, g)
			}
		}
		p := rc.Subjects(r)
		sp := rc.Permissions(r)
		jp := rc.JWTPermissions(r)
		if !sameList(sp.Publish.Allow, p.PublishAllow) || !sameList([]string(jp.Pub.Allow), p.PublishAllow) ||
			!sameList(sp.Publish.Deny, p.PublishDeny) ||
			!sameList(sp.Subscribe.Allow, p.SubscribeAllow) || !sameList([]string(jp.Sub.Allow), p.SubscribeAllow) ||
			!sameList(sp.Subscribe.Deny, p.SubscribeDeny) {
			t.Errorf("%s: server and JWT forms differ", r)
		}
		// The JWT leaves out exactly the denies no allow reaches.
		for _, l := range []struct{ allow, deny, jwtDeny []string }{
			{p.PublishAllow, p.PublishDeny, jp.Pub.Deny}, {p.SubscribeAllow, p.SubscribeDeny, jp.Sub.Deny},
		} {
			for _, d := range l.deny {
				reached := false
				for _, a := range l.allow {
					for _, probe := range []string{d, strings.ReplaceAll(strings.ReplaceAll(d, "*", "x"), ">", "x.y")} {
						reached = reached || subjectMatch(a, probe) && subjectMatch(d, probe)
					}
					reached = reached || subjectMatch(d, strings.ReplaceAll(strings.ReplaceAll(a, "*", "x"), ">", "x.y"))
				}
				if kept := slices.Contains(l.jwtDeny, d); reached && !kept {
					t.Errorf("%s: JWT drops deny %q though an allow reaches it", r, d)
				}
			}
			for _, d := range l.jwtDeny {
				if !slices.Contains(l.deny, d) {
					t.Errorf("%s: JWT deny %q not in the table", r, d)
				}
			}
		}
		// The services' roles answer requests: the recoverer (inspect,
		// prepare, status) and the tool workers (call).
		serves := r == access.RoleRecoverer || r == access.RoleWorker
		if serves != (sp.Response != nil) || serves != (jp.Resp != nil) {
			t.Errorf("%s: response permission %v", r, sp.Response)
		}
		switch {
		case r == access.RoleAdmin:
			if len(p.PublishDeny)+len(p.SubscribeDeny) != 0 || !slices.Equal(p.PublishAllow, []string{">"}) {
				t.Errorf("admin: %+v", p)
			}
			continue
		case !r.Trusted():
			var imported []string
			for _, im := range rc.Imports(r) {
				imported = append(imported, im.Subject)
			}
			if !sameList(p.PublishAllow, imported) || !slices.Equal(p.SubscribeAllow, []string{"_INBOX.>"}) ||
				len(p.PublishDeny)+len(p.SubscribeDeny) != 0 {
				t.Errorf("%s: publishes %v, subscribes %v, denies %v %v; want exactly the imports %v and _INBOX.>",
					r, p.PublishAllow, p.SubscribeAllow, p.PublishDeny, p.SubscribeDeny, imported)
			}
			continue
		}
		for _, s := range append(p.PublishAllow, p.SubscribeAllow...) {
			if s == ">" || strings.HasPrefix(s, "$JS.API.>") || s == "jw.>" || s == "$JS.>" {
				t.Errorf("%s: allows %q", r, s)
			}
		}
		mustDeny := []string{"_INBOX.>", "_R_.>", "$JS.API.STREAM.DELETE.*", "$JS.API.STREAM.PURGE.*", "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.MSG.DELETE.*"}
		if r != access.RoleProber {
			mustDeny = append(mustDeny, "jw.reviews.>")
		}
		if r != access.RoleRecoverer {
			mustDeny = append(mustDeny, "jw.plans.>", "jw.assessments.>", "$JS.API.CONSUMER.CREATE.JW_EVENTS.>", "$JS.ACK.JW_REVIEWS.>")
		}
		if r != access.RoleWorker {
			mustDeny = append(mustDeny, "$JS.API.CONSUMER.CREATE.JW_REQUESTS.>", "$JS.API.CONSUMER.*.*.JW_PLANS.>", "$JS.ACK.*.*.JW_REQUESTS.>", "jw.answers.>", "jw.approvals.*.request")
		}
		if r != access.RoleWorker && r != access.RoleRecoverer {
			mustDeny = append(mustDeny, "jw.events.>", "$KV.jw_leases.>", "$KV.jw_plans.>", "$KV.jw_budget.>")
		}
		if r != access.RoleWorker && r != access.RoleProber {
			mustDeny = append(mustDeny, "$JS.API.STREAM.CREATE.*", "$JS.API.DIRECT.GET.KV_tools_orders.>", "$JS.API.STREAM.MSG.GET.TOOLS_LEDGER")
		}
		for _, s := range mustDeny {
			if !slices.Contains(p.PublishDeny, s) {
				t.Errorf("%s: publish deny lacks %q", r, s)
			}
		}
		// Each service's requests reach its own role only: jw.api.call the
		// tool workers', inspect, prepare and status the recoverer's.
		var others []string
		switch r {
		case access.RoleWorker:
			others = []string{"jw.api.inspect", "jw.api.prepare", "jw.api.status"}
		case access.RoleRecoverer:
			others = []string{"jw.api.call"}
		case access.RoleProber:
			others = []string{"jw.api.call", "jw.api.inspect", "jw.api.prepare", "jw.api.status"}
		}
		for _, subj := range others {
			if !slices.Contains(p.SubscribeDeny, subj) || slices.Contains(p.SubscribeAllow, "jw.api.>") {
				t.Errorf("%s: may receive %s: allow %v, deny %v", r, subj, p.SubscribeAllow, p.SubscribeDeny)
			}
		}
	}
	// An unknown role gets nothing, never nil (which would be everything),
	// and no account.
	u := rc.Permissions("root")
	if u == nil || !slices.Equal(u.Publish.Deny, []string{">"}) || !slices.Equal(u.Subscribe.Deny, []string{">"}) || len(u.Publish.Allow) != 0 {
		t.Errorf("unknown role: %+v", u)
	}
	if rc.AccountName("root") != "" || rc.Imports("root") != nil {
		t.Error("unknown role has an account")
	}
	// The prefixes and the account name reach every subject and account.
	acme := access.RoleConfig{Prefix: "acme", ToolsPrefix: "shop", Account: "ACME"}
	for _, r := range access.Roles {
		p := acme.Subjects(r)
		for _, s := range append(append(p.PublishAllow, p.PublishDeny...), append(p.SubscribeAllow, p.SubscribeDeny...)...) {
			if strings.Contains(s, "jw") || strings.Contains(s, "tools") || strings.Contains(s, "TOOLS") {
				t.Errorf("%s with prefix acme: %q", r, s)
			}
		}
		if !strings.HasPrefix(acme.AccountName(r), "ACME") {
			t.Errorf("%s: account %q", r, acme.AccountName(r))
		}
	}
}

// subjectMatch reports whether subject matches the NATS pattern.
func subjectMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || p != "*" && p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

// TestRoleAccounts checks the account tables: the trusted account holds
// JetStream, the worker, recoverer and admin, and exports exactly what the
// untrusted accounts import; each untrusted role imports what it uses and
// nothing that writes session logs, plans, assessments, buckets, manages
// streams or consumers, or reaches an inbox; batched reads and $SRV answer
// with a stream of responses.
func TestRoleAccounts(t *testing.T) {
	rc := access.RoleConfig{}
	accs := rc.Accounts()
	if len(accs) != 4 || accs[0].Name != "JINGWEI" || !accs[0].JetStream ||
		!slices.Equal(accs[0].Roles, []access.Role{access.RoleWorker, access.RoleRecoverer, access.RoleProber, access.RoleAdmin}) || len(accs[0].Imports) != 0 {
		t.Fatalf("trusted account: %+v", accs[0])
	}
	exported := map[string]access.ServiceExport{}
	for _, e := range accs[0].Exports {
		if _, dup := exported[e.Subject]; dup {
			t.Errorf("%s exported twice", e.Subject)
		}
		exported[e.Subject] = e
	}
	want := map[access.Role][]string{
		access.RoleAgent:    {"jw.requests.*", "jw.api.call", "jw.api.status", "$JS.API.DIRECT.GET.JW_EVENTS", "$JS.API.DIRECT.GET.JW_EVENTS.>", "$JS.API.STREAM.MSG.GET.JW_EVENTS", "$JS.API.STREAM.INFO.JW_EVENTS"},
		access.RoleReviewer: {"jw.reviews.*", "jw.api.status", "jw.api.inspect", "$JS.API.DIRECT.GET.JW_REVIEWS", "$JS.API.STREAM.MSG.GET.JW_EVENTS", "$JS.API.STREAM.INFO.KV_jw_budget"},
		access.RoleHost:     {"jw.api.prepare", "jw.api.status", "jw.api.inspect", "$SRV.>", "$JS.API.STREAM.MSG.GET.JW_ASSESSMENTS", "$JS.API.DIRECT.GET.KV_jw_plans.>", "$JS.API.STREAM.INFO.KV_jw_plans"},
	}
	never := []string{
		"jw.events.s1", "jw.plans.s1", "jw.assessments.s1", "$KV.jw_budget.s.t", "$KV.jw_plans.p", "$KV.jw_leases.s",
		"$JS.API.STREAM.DELETE.JW_EVENTS", "$JS.API.STREAM.PURGE.KV_jw_plans", "$JS.API.STREAM.UPDATE.JW_REVIEWS",
		"$JS.API.STREAM.MSG.DELETE.JW_EVENTS", "$JS.API.STREAM.CREATE.X", "$JS.API.CONSUMER.CREATE.JW_EVENTS.c.jw.events.s1",
		"$JS.API.CONSUMER.MSG.NEXT.JW_REQUESTS.c", "$JS.ACK.JW_REQUESTS.c.1.1.1.0.0", "_INBOX.x", "_R_.x.y",
		"$JS.API.DIRECT.GET.KV_jw_budget.$KV.jw_budget.s.t", "$JS.API.STREAM.INFO.TOOLS_LEDGER", "jw.api.x.y",
	}
	for _, a := range accs[1:] {
		if len(a.Roles) != 1 || a.JetStream || len(a.Exports) != 0 || a.Name != rc.AccountName(a.Roles[0]) {
			t.Errorf("account %+v", a)
			continue
		}
		r := a.Roles[0]
		var subjects []string
		for _, im := range a.Imports {
			subjects = append(subjects, im.Subject)
			e, ok := exported[im.Subject]
			if !ok || !slices.Contains(e.Accounts, a.Name) || e.Response != im.Response {
				t.Errorf("%s imports %s, exported as %+v", r, im.Subject, e)
			}
			streamed := im.Subject == "$SRV.>" || strings.HasPrefix(im.Subject, "$JS.API.DIRECT.GET.") && !strings.HasSuffix(im.Subject, ".>")
			if streamed != (im.Response == access.ResponseStream) || im.Why == "" {
				t.Errorf("%s: %s response %s, why %q", r, im.Subject, im.Response, im.Why)
			}
			for _, bad := range never {
				if subjectMatch(im.Subject, bad) {
					t.Errorf("%s imports %s, which reaches %s", r, im.Subject, bad)
				}
			}
		}
		for _, w := range want[r] {
			if !slices.Contains(subjects, w) {
				t.Errorf("%s does not import %s", r, w)
			}
		}
		if !slices.Contains(subjects, "$JS.API.INFO") {
			t.Errorf("%s does not import $JS.API.INFO: the server's own JetStream API would answer first", r)
		}
	}
	if n := len(exported["jw.api.status"].Accounts); n != 3 {
		t.Errorf("jw.api.status exported to %d accounts", n)
	}
	if e := exported["jw.requests.*"]; !slices.Equal(e.Accounts, []string{"JINGWEI_AGENT"}) {
		t.Errorf("requests exported to %v", e.Accounts)
	}
}

func TestEmbeddedRefusesBadUsers(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	init, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	k := init.Roles[0].PublicKey
	for name, users := range map[string]map[access.Role]string{
		"unknown role": {"root": k},
		"shared key":   {access.RoleAgent: k, access.RoleHost: k},
		"not a user":   {access.RoleAgent: init.Roles[1].PublicKey[1:]},
	} {
		_, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Auth: access.Users{Keys: users}})
		if err == nil {
			t.Errorf("%s: started", name)
		}
	}
	// Without users the server stays open: no credentials needed.
	e, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	// With users, a client without a key is refused.
	keys, _ := dir.PublicKeys()
	e2, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval, Auth: access.Users{Keys: keys}})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown()
	if _, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: e2.ClientURL(), ConnectTimeout: time.Second}); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous client: %v", err)
	}
	kp, _ := dir.KeyPair(access.RoleAgent)
	nc, err = e2.Connect(natsnode.NkeyOption(kp))
	if err != nil {
		t.Fatalf("NkeyOption: %v", err)
	}
	nc.Close()
}
