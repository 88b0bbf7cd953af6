package access_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// TestAccountsBlockConfigFile writes a full nats-server configuration file
// with the rendered accounts block (and prefixes and an account name other
// than the defaults), loads it the way nats-server does, checks the parsed
// accounts, users, permissions, exports and imports are the tables', starts
// the server and runs the role check against it.
func TestAccountsBlockConfigFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := access.RoleConfig{Prefix: "acme", ToolsPrefix: "shop", Account: "ACME"}
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	if _, err := dir.Init(); err != nil {
		t.Fatal(err)
	}
	keys, err := dir.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	block, err := rc.AccountsBlock(keys)
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nserver_name: jw-conf-test\njetstream {\n  store_dir: %q\n}\n\n%s", t.TempDir(), block)
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the configuration: %v\n%s", err, conf)
	}
	if len(opts.Nkeys) != len(access.Roles) {
		t.Fatalf("%d nkey users parsed", len(opts.Nkeys))
	}
	byKey := map[string]access.Role{}
	for r, k := range keys {
		byKey[k] = r
	}
	for _, u := range opts.Nkeys {
		r, ok := byKey[u.Nkey]
		if !ok {
			t.Fatalf("unknown user %s", u.Nkey)
		}
		if u.Account == nil || u.Account.Name != rc.AccountName(r) {
			t.Errorf("%s: in account %v, want %s", r, u.Account, rc.AccountName(r))
		}
		want := rc.Permissions(r)
		if !sameList(u.Permissions.Publish.Allow, want.Publish.Allow) || !sameList(u.Permissions.Publish.Deny, want.Publish.Deny) ||
			!sameList(u.Permissions.Subscribe.Allow, want.Subscribe.Allow) || !sameList(u.Permissions.Subscribe.Deny, want.Subscribe.Deny) {
			t.Errorf("%s: parsed permissions differ from the table:\n got %+v %+v\nwant %+v %+v", r, *u.Permissions.Publish, *u.Permissions.Subscribe, *want.Publish, *want.Subscribe)
		}
		if (u.Permissions.Response == nil) != (want.Response == nil) ||
			(want.Response != nil && *u.Permissions.Response != *want.Response) {
			t.Errorf("%s: response permission %+v, want %+v", r, u.Permissions.Response, want.Response)
		}
	}
	accs := map[string]*server.Account{}
	for _, a := range opts.Accounts {
		accs[a.Name] = a
	}
	for _, want := range rc.Accounts() {
		a := accs[want.Name]
		if a == nil {
			t.Errorf("account %s not defined (have %v)", want.Name, accs)
			continue
		}
		if a.NumServiceImports() != len(want.Imports) {
			t.Errorf("%s: %d service imports parsed, want %d", want.Name, a.NumServiceImports(), len(want.Imports))
		}
		for _, e := range want.Exports {
			if !a.IsExportService(e.Subject) {
				t.Errorf("%s: %s not exported", want.Name, e.Subject)
			}
		}
	}
	if len(accs) != 4 || accs["ACME"] == nil || accs["ACME_AGENT"] == nil || accs["ACME_REVIEWER"] == nil || accs["ACME_HOST"] == nil {
		t.Errorf("accounts %v", accs)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	admin, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: s.ClientURL(), NKeySeedFile: dir.SeedFile(access.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{Prefix: rc.Prefix}); err != nil {
		t.Fatal(err)
	}
	rep, err := access.CheckRoles(ctx, access.CheckConfig{URL: s.ClientURL(), Dir: dir, Subjects: rc})
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, rep)
	if !rep.OK {
		t.Fatal("role check failed on the config-file server")
	}
	for _, r := range rep.Results {
		if r.Account != rc.AccountName(r.Role) {
			t.Errorf("%s %s: account %q", r.Role, r.Action, r.Account)
		}
	}
	for _, r := range rep.Results {
		if strings.Contains(r.Action, "jw.") || strings.Contains(r.Action, "JW_") {
			t.Errorf("probe %q ignores the prefix", r.Action)
		}
	}
}

func sameList(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func TestAccountsBlockRefusesBadUsers(t *testing.T) {
	dir := access.KeyDir(filepath.Join(t.TempDir(), "keys"))
	init, err := dir.Init()
	if err != nil {
		t.Fatal(err)
	}
	k := init.Roles[0].PublicKey
	for name, users := range map[string]map[access.Role]string{
		"none":         nil,
		"unknown role": {"root": k},
		"shared key":   {access.RoleAgent: k, access.RoleAdmin: k},
		"not a user":   {access.RoleAgent: "ABCDEF"},
	} {
		if _, err := (access.RoleConfig{}).AccountsBlock(users); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := (access.RoleConfig{Prefix: "a.b"}).AccountsBlock(map[access.Role]string{access.RoleAgent: k}); err == nil {
		t.Error("bad prefix accepted")
	}
	if _, err := (access.RoleConfig{Account: "A B"}).AccountsBlock(map[access.Role]string{access.RoleAgent: k}); err == nil {
		t.Error("bad account name accepted")
	}
	// Some roles only: every account is still defined (the exports name
	// them all), with users for those roles alone.
	block, err := (access.RoleConfig{}).AccountsBlock(map[access.Role]string{access.RoleAgent: k})
	if err != nil {
		t.Fatal(err)
	}
	var opts server.Options
	if err := opts.ProcessConfigString(block); err != nil {
		t.Fatalf("%v\n%s", err, block)
	}
	if len(opts.Accounts) != 4 || len(opts.Nkeys) != 1 || opts.Nkeys[0].Account.Name != "JINGWEI_AGENT" {
		t.Errorf("%d accounts, %d users", len(opts.Accounts), len(opts.Nkeys))
	}
}
