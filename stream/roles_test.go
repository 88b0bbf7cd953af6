package stream_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// roleServer is an embedded server that enforces the roles, with the
// topology created by admin.
type roleServer struct {
	srv   *stream.Embedded
	dir   stream.KeyDir
	admin *nats.Conn
	topo  *stream.Topology // admin's
}

func startRoleServer(t *testing.T) *roleServer {
	t.Helper()
	dir := stream.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	return startRoleServerWith(t, dir, stream.EmbeddedConfig{Users: keys})
}

func startRoleServerWith(t *testing.T, dir stream.KeyDir, cfg stream.EmbeddedConfig) *roleServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Dir, cfg.Listen, cfg.Sync = t.TempDir(), "127.0.0.1:-1", stream.SyncInterval
	e, err := stream.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	rs := &roleServer{srv: e, dir: dir}
	rs.admin = rs.connect(t, stream.RoleAdmin)
	js, _ := jetstream.New(rs.admin)
	if rs.topo, err = stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	// The lead is adding AllowDirect to JW_EVENTS; until then the test
	// topology gets it here, so the readers' direct gets really answer.
	si, err := rs.topo.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !si.Config.AllowDirect {
		c := si.Config
		c.AllowDirect = true
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// connect connects as role with its nkey seed file, as a client would.
func (rs *roleServer) connect(t *testing.T, r stream.Role) *nats.Conn {
	t.Helper()
	nc, err := stream.Connect(context.Background(), stream.ConnectConfig{URL: rs.srv.ClientURL(), NKeySeedFile: rs.dir.SeedFile(r), Name: "test " + string(r)})
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func checkOK(t *testing.T, rep *stream.CheckReport) {
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
	rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	if !rep.OK {
		t.Fatal("report not OK")
	}
	// Every role ran every probe, and each expected refusals and allowances.
	per := map[stream.Role]map[stream.Outcome]int{}
	for _, r := range rep.Results {
		if per[r.Role] == nil {
			per[r.Role] = map[stream.Outcome]int{}
		}
		per[r.Role][r.Expect]++
	}
	for _, r := range stream.Roles {
		if per[r][stream.Allowed] == 0 {
			t.Errorf("%s: no allowed probes", r)
		}
		if r != stream.RoleAdmin && per[r][stream.Refused] < 20 {
			t.Errorf("%s: only %d refused probes", r, per[r][stream.Refused])
		}
	}
}

// TestRolesCheckCoversTheAttacks: the checker's probes include every attack
// the roles defend against, for every role.
func TestRolesCheckCoversTheAttacks(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir, Roles: []stream.Role{stream.RoleAgent}})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	p := stream.DefaultProbeSession
	want := []string{
		"publish jw.events." + p + " (JetStream)", "publish jw.plans." + p + " (JetStream)",
		"publish jw.reviews." + p + " (JetStream)", "publish jw.assessments." + p + " (JetStream)",
		"publish _INBOX.<other client> (forged reply)",
		"KV write jw_plans", "KV write jw_leases", "KV write jw_budget",
		"stream delete JW_EVENTS", "stream purge JW_EVENTS", "stream update JW_EVENTS",
		"stream delete JW_REVIEWS", "stream purge JW_REVIEWS", "stream update JW_REVIEWS",
		"stream delete KV_jw_plans", "stream purge KV_jw_leases", "stream update KV_jw_budget",
		"message delete JW_REVIEWS",
		"consumer on JW_REQUESTS", "consumer on JW_PLANS", "consumer on JW_EVENTS", "consumer on JW_REVIEWS",
		"ack on JW_REQUESTS", "ack on JW_PLANS (with domain)",
		"subscribe jw.api.>", "subscribe $SRV.>",
	}
	have := map[string]stream.CheckResult{}
	for _, r := range rep.Results {
		have[r.Action] = r
	}
	for _, a := range want {
		r, ok := have[a]
		if !ok {
			t.Errorf("no probe %q", a)
			continue
		}
		if r.Expect != stream.Refused || r.Got != stream.Refused || !strings.Contains(r.Detail, "Permissions Violation") {
			t.Errorf("%q: expect %s got %s (%s); want refused by a permissions violation", a, r.Expect, r.Got, r.Detail)
		}
	}
}

// TestRolesCheckCatchesWrongPermissions gives every role admin's rights, as
// a misconfigured live deployment would: the check reports every refusal
// that did not happen, and its probes change nothing on the server.
func TestRolesCheckCatchesWrongPermissions(t *testing.T) {
	dir := stream.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	rs := startRoleServerWith(t, dir, stream.EmbeddedConfig{Users: keys, Options: func(o *server.Options) {
		for _, u := range o.Nkeys {
			u.Permissions = nil // everything allowed
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := serverState(t, ctx, rs)
	rep, err := stream.CheckRoles(ctx, stream.CheckConfig{URL: rs.srv.ClientURL(), Dir: rs.dir})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatal("report OK with every permission granted")
	}
	bad := map[string]bool{}
	for _, f := range rep.Failures() {
		if f.Expect != stream.Refused || f.Got != stream.Allowed {
			t.Errorf("%s %s: expect %s got %s (%s)", f.Role, f.Action, f.Expect, f.Got, f.Detail)
		}
		if strings.Contains(f.Detail, "STORED") {
			t.Errorf("%s %s stored a message: %s", f.Role, f.Action, f.Detail)
		}
		bad[string(f.Role)+" "+f.Action] = true
	}
	for _, k := range []string{
		"agent publish jw.events." + stream.DefaultProbeSession + " (JetStream)",
		"agent stream delete JW_EVENTS", "host KV write jw_plans", "reviewer consumer on JW_REQUESTS",
		"worker stream purge TOOLS_LEDGER", "recoverer publish jw.reviews." + stream.DefaultProbeSession + " (JetStream)",
		"worker subscribe jw.api.>", "agent publish _INBOX.<other client> (forged reply)",
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
// admin has wildcard rights, every non-admin role carries the guards it
// does not own, the recoverer alone answers requests, and the server and
// JWT forms hold the same lists.
func TestRoleTables(t *testing.T) {
	rc := stream.RoleConfig{}
	for _, r := range stream.Roles {
		for _, g := range rc.Grants(r) {
			if g.Why == "" || len(g.Subjects) == 0 {
				t.Errorf("%s: grant without reason or subjects: %+v", r, g)
			}
		}
		p := rc.Subjects(r)
		sp := rc.Permissions(r)
		jp := rc.JWTPermissions(r)
		if !sameList(sp.Publish.Allow, p.PublishAllow) || !sameList([]string(jp.Pub.Allow), p.PublishAllow) ||
			!sameList(sp.Publish.Deny, p.PublishDeny) || !sameList([]string(jp.Pub.Deny), p.PublishDeny) ||
			!sameList(sp.Subscribe.Allow, p.SubscribeAllow) || !sameList([]string(jp.Sub.Allow), p.SubscribeAllow) ||
			!sameList(sp.Subscribe.Deny, p.SubscribeDeny) || !sameList([]string(jp.Sub.Deny), p.SubscribeDeny) {
			t.Errorf("%s: server and JWT forms differ", r)
		}
		if (r == stream.RoleRecoverer) != (sp.Response != nil) || (r == stream.RoleRecoverer) != (jp.Resp != nil) {
			t.Errorf("%s: response permission %v", r, sp.Response)
		}
		if r == stream.RoleAdmin {
			if len(p.PublishDeny)+len(p.SubscribeDeny) != 0 || !slices.Equal(p.PublishAllow, []string{">"}) {
				t.Errorf("admin: %+v", p)
			}
			continue
		}
		for _, s := range append(p.PublishAllow, p.SubscribeAllow...) {
			if s == ">" || strings.HasPrefix(s, "$JS.API.>") || s == "jw.>" || s == "$JS.>" {
				t.Errorf("%s: allows %q", r, s)
			}
		}
		mustDeny := []string{"_INBOX.>", "$JS.API.STREAM.DELETE.*", "$JS.API.STREAM.PURGE.*", "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.MSG.DELETE.*"}
		if r != stream.RoleWorker && r != stream.RoleRecoverer {
			mustDeny = append(mustDeny, "jw.events.>", "$KV.jw_plans.>", "$KV.jw_leases.>", "$KV.jw_budget.>")
		}
		if r != stream.RoleRecoverer {
			mustDeny = append(mustDeny, "jw.plans.>", "jw.assessments.>", "$JS.API.CONSUMER.*.JW_EVENTS.>", "$JS.ACK.JW_REVIEWS.>")
		}
		if r != stream.RoleReviewer {
			mustDeny = append(mustDeny, "jw.reviews.>")
		}
		if r != stream.RoleWorker {
			mustDeny = append(mustDeny, "$JS.API.CONSUMER.*.JW_REQUESTS.>", "$JS.API.CONSUMER.*.*.JW_PLANS.>", "$JS.ACK.*.*.JW_REQUESTS.>", "$JS.API.STREAM.CREATE.*")
		}
		for _, s := range mustDeny {
			if !slices.Contains(p.PublishDeny, s) {
				t.Errorf("%s: publish deny lacks %q", r, s)
			}
		}
		if r != stream.RoleRecoverer && (!slices.Contains(p.SubscribeDeny, "jw.api.>") || !slices.Contains(p.SubscribeDeny, "$SRV.>")) {
			t.Errorf("%s: may receive service requests: %v", r, p.SubscribeDeny)
		}
	}
	// An unknown role gets nothing, never nil (which would be everything).
	u := rc.Permissions("root")
	if u == nil || !slices.Equal(u.Publish.Deny, []string{">"}) || !slices.Equal(u.Subscribe.Deny, []string{">"}) || len(u.Publish.Allow) != 0 {
		t.Errorf("unknown role: %+v", u)
	}
	// The prefixes reach every subject.
	acme := stream.RoleConfig{Prefix: "acme", ToolsPrefix: "shop"}
	for _, r := range stream.Roles {
		p := acme.Subjects(r)
		for _, s := range append(append(p.PublishAllow, p.PublishDeny...), append(p.SubscribeAllow, p.SubscribeDeny...)...) {
			if strings.Contains(s, "jw") || strings.Contains(s, "tools") || strings.Contains(s, "TOOLS") {
				t.Errorf("%s with prefix acme: %q", r, s)
			}
		}
	}
}

func TestEmbeddedRefusesBadUsers(t *testing.T) {
	dir := stream.KeyDir(filepath.Join(t.TempDir(), "keys"))
	init, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	k := init.Roles[0].PublicKey
	for name, users := range map[string]map[stream.Role]string{
		"unknown role": {"root": k},
		"shared key":   {stream.RoleAgent: k, stream.RoleHost: k},
		"not a user":   {stream.RoleAgent: init.Roles[1].PublicKey[1:]},
	} {
		_, err := stream.StartEmbedded(context.Background(), stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Users: users})
		if err == nil {
			t.Errorf("%s: started", name)
		}
	}
	// Without users the server stays open: no credentials needed.
	e, err := stream.StartEmbedded(context.Background(), stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval})
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
	e2, err := stream.StartEmbedded(context.Background(), stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval, Users: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown()
	if _, err := stream.Connect(context.Background(), stream.ConnectConfig{URL: e2.ClientURL(), ConnectTimeout: time.Second}); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous client: %v", err)
	}
	kp, _ := dir.KeyPair(stream.RoleAgent)
	nc, err = e2.Connect(stream.NkeyOption(kp))
	if err != nil {
		t.Fatalf("NkeyOption: %v", err)
	}
	nc.Close()
}
