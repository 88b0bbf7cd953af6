package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestAuthInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	st, out, errOut := runCLI("auth", "init", "--dir", dir)
	if st != exitOK {
		t.Fatalf("auth init: exit %d: %s", st, errOut)
	}
	if fileMode(t, dir) != 0o700 {
		t.Errorf("dir mode %04o", fileMode(t, dir))
	}
	for _, r := range access.Roles {
		f := filepath.Join(dir, string(r)+".nk")
		if fileMode(t, f) != 0o600 {
			t.Errorf("%s mode %04o", f, fileMode(t, f))
		}
		if !strings.Contains(out, f) {
			t.Errorf("output does not name %s", f)
		}
	}
	if fileMode(t, filepath.Join(dir, "planner.nk")) != 0o600 || fileMode(t, filepath.Join(dir, "planners")) != 0o644 {
		t.Error("planner files' modes")
	}
	for _, want := range []string{"accounts {", "JINGWEI_AGENT", "imports = [", "exports = [", "jetstream: enabled", "allow_responses", "created", "--nkey"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// Again, as JSON: every key kept, the block included.
	st, out, _ = runCLI("auth", "init", "--dir", dir, "--json")
	if st != exitOK {
		t.Fatalf("second init: exit %d", st)
	}
	var res struct {
		Roles []struct {
			Role, PublicKey string
			Created         bool
		} `json:"roles"`
		Planner struct {
			PublicKey string `json:"public_key"`
		} `json:"planner"`
		PlannerTrusted bool   `json:"planner_trusted"`
		Accounts       string `json:"accounts_block"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Roles) != len(access.Roles) || !res.PlannerTrusted || !strings.Contains(res.Accounts, "accounts {") {
		t.Errorf("init --json: %+v", res)
	}
	for _, r := range res.Roles {
		if r.Created {
			t.Errorf("second init created %s", r.Role)
		}
	}

	insecure := filepath.Join(t.TempDir(), "open")
	os.Mkdir(insecure, 0o755)
	os.Chmod(insecure, 0o755)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"insecure dir", []string{"auth", "init", "--dir", insecure}, exitUsage, "chmod 700 " + insecure},
		{"no --dir", []string{"auth", "init"}, exitUsage, "--dir is required"},
		{"bad prefix", []string{"auth", "init", "--dir", dir, "--prefix", "a.b"}, exitUsage, "Prefix"},
		{"stray argument", []string{"auth", "init", "--dir", dir, "extra"}, exitUsage, "unexpected"},
		{"no subcommand", []string{"auth"}, exitUsage, "auth init"},
		{"unknown subcommand", []string{"auth", "rotate"}, exitUsage, "unknown subcommand"},
		{"help", []string{"auth", "--help"}, exitOK, "Exit status"},
		{"init help", []string{"auth", "init", "--help"}, exitOK, "-tools-prefix"},
	} {
		st, _, errOut := runCLI(tc.args...)
		if st != tc.status || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", tc.name, st, tc.status, errOut, tc.stderr)
		}
	}
	// A seed others can read is refused, naming the fix.
	seed := filepath.Join(dir, "host.nk")
	os.Chmod(seed, 0o644)
	if st, _, errOut := runCLI("auth", "config", "--dir", dir); st != exitUsage || !strings.Contains(errOut, "chmod 600 "+seed) {
		t.Errorf("insecure seed: exit %d, %q", st, errOut)
	}
}

func TestAuthConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if st, _, _ := runCLI("auth", "config", "--dir", dir); st != exitUsage {
		t.Errorf("config without keys: exit %d", st)
	}
	if st, _, _ := runCLI("auth", "init", "--dir", dir); st != exitOK {
		t.Fatal("init")
	}
	st, out, _ := runCLI("auth", "config", "--dir", dir, "--prefix", "acme", "--account", "ACME")
	if st != exitOK {
		t.Fatalf("config: exit %d", st)
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\n%s", t.TempDir(), out)
	path := writeFile(t, "server.conf", conf)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the printed block: %v", err)
	}
	accounts := map[string]bool{}
	for _, a := range opts.Accounts {
		accounts[a.Name] = true
	}
	if len(opts.Nkeys) != len(access.Roles) || !strings.Contains(out, `"acme.requests.*"`) ||
		!accounts["ACME"] || !accounts["ACME_AGENT"] || !accounts["ACME_REVIEWER"] || !accounts["ACME_HOST"] {
		t.Errorf("%d users, accounts %v; prefix in block: %v", len(opts.Nkeys), accounts, strings.Contains(out, "acme."))
	}
	if st, _, errOut := runCLI("auth", "config", "--dir", dir, "--account", "A B"); st != exitUsage || !strings.Contains(errOut, "Account") {
		t.Errorf("bad account name: exit %d %s", st, errOut)
	}
}

// authServer starts an embedded server with the keys of dir; widen puts
// every role into the trusted account with full rights (a misconfigured
// server, as before the accounts).
func authServer(t *testing.T, dir string, widen bool) string {
	t.Helper()
	keys, err := access.KeyDir(dir).PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval, Auth: access.Users{Keys: keys}}
	if widen {
		cfg.Options = func(o *server.Options) {
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
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := natsnode.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	makeTopology(t, e.ClientURL(), natsnode.ConnectConfig{NKeySeedFile: access.KeyDir(dir).SeedFile(access.RoleAdmin)})
	return e.ClientURL()
}

// makeTopology creates the topology as admin.
func makeTopology(t *testing.T, url string, cc natsnode.ConnectConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc.URL = url
	nc, err := natsnode.Connect(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
}

type checkJSON struct {
	OK      bool `json:"ok"`
	Results []struct {
		Role   string `json:"role"`
		Action string `json:"action"`
		Expect string `json:"expect"`
		Got    string `json:"got"`
		OK     bool   `json:"ok"`
	} `json:"results"`
}

func TestAuthCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if st, _, _ := runCLI("auth", "init", "--dir", dir); st != exitOK {
		t.Fatal("init")
	}
	url := authServer(t, dir, false)
	st, out, errOut := runCLI("auth", "check", "--dir", dir, "--server", url)
	if st != exitOK {
		t.Fatalf("check: exit %d\n%s\n%s", st, out, errOut)
	}
	for _, want := range []string{"ROLE", "ACCOUNT", "JINGWEI_AGENT", "refused (permission)", "refused (account isolation)", "all "} {
		if !strings.Contains(out, want) || strings.Contains(out, "FAIL") {
			t.Errorf("check output lacks %q or has a FAIL:\n%s", want, out)
		}
	}
	st, out, _ = runCLI("auth", "check", "--dir", dir, "--server", url, "--json", "--roles", "agent,worker")
	var rep checkJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil || st != exitOK || !rep.OK {
		t.Fatalf("check --json: exit %d, %v, %s", st, err, out)
	}
	roles := map[string]bool{}
	for _, r := range rep.Results {
		roles[r.Role] = true
	}
	if len(roles) != 2 || !roles["agent"] || !roles["worker"] {
		t.Errorf("--roles agent,worker checked %v", roles)
	}

	// A server that lets every role do everything: exit 3, the rows named.
	wide := authServer(t, dir, true)
	st, out, _ = runCLI("auth", "check", "--dir", dir, "--server", wide, "--roles", "agent")
	if st != exitRefused || !strings.Contains(out, "FAIL") || !strings.Contains(out, "NOT as expected") {
		t.Errorf("wide server: exit %d\n%s", st, out)
	}
	st, out, _ = runCLI("auth", "check", "--dir", dir, "--server", wide, "--roles", "agent", "--json")
	rep = checkJSON{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || st != exitRefused || rep.OK {
		t.Errorf("wide server --json: exit %d %v ok=%v", st, err, rep.OK)
	}
	found := false
	for _, r := range rep.Results {
		if r.Action == "publish jw.events."+access.DefaultProbeSession+" (JetStream)" && r.Expect == "refused" && r.Got == "allowed" && !r.OK {
			found = true
		}
	}
	if !found {
		t.Error("the agent's publish on jw.events not reported")
	}

	for _, tc := range []struct {
		name   string
		args   []string
		status int
	}{
		{"unknown role", []string{"auth", "check", "--dir", dir, "--server", url, "--roles", "root"}, exitUsage},
		{"no dir", []string{"auth", "check", "--server", url}, exitUsage},
		{"bad timeout", []string{"auth", "check", "--dir", dir, "--server", url, "--timeout", "0s"}, exitUsage},
		{"missing keys", []string{"auth", "check", "--dir", t.TempDir(), "--server", url}, exitUsage},
		{"no server", []string{"auth", "check", "--dir", dir, "--server", "nats://127.0.0.1:1", "--timeout", "300ms"}, exitFailure},
	} {
		if st, _, errOut := runCLI(tc.args...); st != tc.status {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, st, tc.status, errOut)
		}
	}
}

// testOperator writes an operator's seed (0600) and returns its file, the
// operator JWT, and the system account's public key and JWT.
func testOperator(t *testing.T) (seedFile, operatorJWT, sys, sysJWT string) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.SystemAccount = spub
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	sjwt, _ := jwt.NewAccountClaims(spub).Encode(okp)
	seed, _ := okp.Seed()
	f := filepath.Join(t.TempDir(), "operator.nk")
	if err := os.WriteFile(f, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return f, ojwt, spub, sjwt
}

// operatorServer starts a nats-server in operator mode whose memory
// resolver preloads the system account and includes the accounts auth
// creds wrote to dir; it returns the URL.
func operatorServer(t *testing.T, dir, operatorJWT, sys, sysJWT string) string {
	t.Helper()
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\noperator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload {\n  %s: %q\n  include \"resolver-preload.conf\"\n}\n",
		t.TempDir(), operatorJWT, sys, sys, sysJWT)
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the accounts auth creds wrote: %v", err)
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
	return s.ClientURL()
}

func TestAuthCreds(t *testing.T) {
	operatorSeed, ojwt, sys, sysJWT := testOperator(t)
	dir := filepath.Join(t.TempDir(), "keys")
	if st, _, _ := runCLI("auth", "init", "--dir", dir); st != exitOK {
		t.Fatal("init")
	}
	st, out, errOut := runCLI("auth", "creds", "--dir", dir, "--operator-seed", operatorSeed, "--json")
	if st != exitOK {
		t.Fatalf("creds: exit %d: %s", st, errOut)
	}
	var res access.RoleCreds
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Users) != len(access.Roles) || len(res.Accounts) != 4 {
		t.Fatalf("creds --json: %v %s", err, out)
	}
	for _, f := range res.Users {
		if fileMode(t, f.Path) != 0o600 || f.Path != filepath.Join(dir, string(f.Role)+".creds") {
			t.Errorf("%s: %s mode %04o", f.Role, f.Path, fileMode(t, f.Path))
		}
	}
	for _, a := range res.Accounts {
		if fileMode(t, a.SeedFile) != 0o600 || fileMode(t, a.JWTFile) != 0o644 {
			t.Errorf("%s: seed %04o jwt %04o", a.Name, fileMode(t, a.SeedFile), fileMode(t, a.JWTFile))
		}
	}
	if strings.Contains(errOut, "warning") {
		t.Errorf("creds warned: %s", errOut)
	}
	url := operatorServer(t, dir, ojwt, sys, sysJWT)
	makeTopology(t, url, natsnode.ConnectConfig{Creds: filepath.Join(dir, "admin.creds")})
	if st, out, _ := runCLI("auth", "check", "--dir", dir, "--server", url, "--operator"); st != exitOK {
		t.Fatalf("check --operator: exit %d\n%s", st, out)
	}
	// Issued again (table output, one role): files replaced, still valid,
	// the accounts kept.
	st, out, _ = runCLI("auth", "creds", "--dir", dir, "--operator-seed", operatorSeed, "--expires", "1h", "--roles", "agent")
	if st != exitOK || !strings.Contains(out, "CREDS FILE") || !strings.Contains(out, "JINGWEI_HOST") || !strings.Contains(out, "resolver_preload") {
		t.Errorf("creds again: exit %d\n%s", st, out)
	}
	for _, a := range res.Accounts {
		if !strings.Contains(out, a.PublicKey) {
			t.Errorf("account %s got a new key", a.Name)
		}
	}
	if st, out, _ := runCLI("auth", "check", "--dir", dir, "--server", url, "--operator", "--roles", "agent"); st != exitOK {
		t.Fatalf("check --operator after reissue: exit %d\n%s", st, out)
	}

	userSeed := filepath.Join(dir, "agent.nk")
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	accountFile := filepath.Join(t.TempDir(), "account.nk")
	os.WriteFile(accountFile, accountSeed, 0o600)
	insecure := filepath.Join(t.TempDir(), "insecure.nk")
	b, _ := os.ReadFile(operatorSeed)
	os.WriteFile(insecure, b, 0o644)
	os.Chmod(insecure, 0o644)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"insecure operator seed", []string{"auth", "creds", "--dir", dir, "--operator-seed", insecure}, exitUsage, "chmod 600 " + insecure},
		{"user seed as operator", []string{"auth", "creds", "--dir", dir, "--operator-seed", userSeed}, exitUsage, "not an operator key"},
		{"account seed as operator", []string{"auth", "creds", "--dir", dir, "--operator-seed", accountFile}, exitUsage, "not an operator key"},
		{"no operator seed", []string{"auth", "creds", "--dir", dir}, exitUsage, "--operator-seed is required"},
		{"missing operator seed", []string{"auth", "creds", "--dir", dir, "--operator-seed", filepath.Join(dir, "nope")}, exitUsage, "no such file"},
		{"unknown role", []string{"auth", "creds", "--dir", dir, "--operator-seed", operatorSeed, "--roles", "root"}, exitUsage, "unknown role"},
	} {
		st, _, errOut := runCLI(tc.args...)
		if st != tc.status || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", tc.name, st, tc.status, errOut, tc.stderr)
		}
	}
}
