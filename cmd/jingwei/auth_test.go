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
	for _, r := range stream.Roles {
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
	for _, want := range []string{"authorization {", "allow_responses", "created", "--nkey"} {
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
		Authorization  string `json:"authorization"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Roles) != len(stream.Roles) || !res.PlannerTrusted || !strings.Contains(res.Authorization, "authorization {") {
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
	st, out, _ := runCLI("auth", "config", "--dir", dir, "--prefix", "acme")
	if st != exitOK {
		t.Fatalf("config: exit %d", st)
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\n%s", t.TempDir(), out)
	path := writeFile(t, "server.conf", conf)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the printed block: %v", err)
	}
	if len(opts.Nkeys) != len(stream.Roles) || !strings.Contains(out, `"acme.requests.*"`) {
		t.Errorf("%d users; prefix in block: %v", len(opts.Nkeys), strings.Contains(out, "acme."))
	}
}

// authServer starts an embedded server with the keys of dir; widen gives
// every role full rights (a misconfigured server).
func authServer(t *testing.T, dir string, widen bool) string {
	t.Helper()
	keys, err := stream.KeyDir(dir).PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval, Users: keys}
	if widen {
		cfg.Options = func(o *server.Options) {
			for _, u := range o.Nkeys {
				u.Permissions = nil
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := stream.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	makeTopology(t, e.ClientURL(), stream.ConnectConfig{NKeySeedFile: stream.KeyDir(dir).SeedFile(stream.RoleAdmin)})
	return e.ClientURL()
}

// makeTopology creates the topology as admin.
func makeTopology(t *testing.T, url string, cc stream.ConnectConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc.URL = url
	nc, err := stream.Connect(ctx, cc)
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
	if !strings.Contains(out, "ROLE") || !strings.Contains(out, "all ") || strings.Contains(out, "FAIL") {
		t.Errorf("check output:\n%s", out)
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
		if r.Action == "publish jw.events."+stream.DefaultProbeSession+" (JetStream)" && r.Expect == "refused" && r.Got == "allowed" && !r.OK {
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

// operatorServer starts an embedded server in operator mode with one
// JetStream account and returns its URL and the account seed file.
func operatorServer(t *testing.T) (string, string) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.SystemAccount = spub
	ojwt, _ := oc.Encode(okp)
	op, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	sjwt, _ := jwt.NewAccountClaims(spub).Encode(okp)
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, _ := ac.Encode(okp)
	res := &server.MemAccResolver{}
	res.Store(spub, sjwt)
	res.Store(apub, ajwt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: stream.SyncInterval, Options: func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{op}
		o.AccountResolver = res
		o.SystemAccount = spub
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	seed, _ := akp.Seed()
	f := filepath.Join(t.TempDir(), "account.nk")
	if err := os.WriteFile(f, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return e.ClientURL(), f
}

func TestAuthCreds(t *testing.T) {
	url, accountSeed := operatorServer(t)
	dir := filepath.Join(t.TempDir(), "keys")
	if st, _, _ := runCLI("auth", "init", "--dir", dir); st != exitOK {
		t.Fatal("init")
	}
	st, out, errOut := runCLI("auth", "creds", "--dir", dir, "--account-seed", accountSeed, "--json")
	if st != exitOK {
		t.Fatalf("creds: exit %d: %s", st, errOut)
	}
	var res struct {
		Files []stream.CredsFile `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Files) != len(stream.Roles) {
		t.Fatalf("creds --json: %v %s", err, out)
	}
	for _, f := range res.Files {
		if fileMode(t, f.Path) != 0o600 || f.Path != filepath.Join(dir, string(f.Role)+".creds") {
			t.Errorf("%s: %s mode %04o", f.Role, f.Path, fileMode(t, f.Path))
		}
	}
	if strings.Contains(errOut, "warning") {
		t.Errorf("creds warned: %s", errOut)
	}
	makeTopology(t, url, stream.ConnectConfig{Creds: filepath.Join(dir, "admin.creds")})
	if st, out, _ := runCLI("auth", "check", "--dir", dir, "--server", url, "--operator"); st != exitOK {
		t.Fatalf("check --operator: exit %d\n%s", st, out)
	}
	// Issued again (table output): files replaced, still valid.
	if st, out, _ := runCLI("auth", "creds", "--dir", dir, "--account-seed", accountSeed, "--expires", "1h"); st != exitOK || !strings.Contains(out, "CREDS FILE") {
		t.Errorf("creds again: exit %d\n%s", st, out)
	}

	userSeed := filepath.Join(dir, "agent.nk")
	other, _ := nkeys.CreateAccount()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	os.WriteFile(otherFile, otherSeed, 0o600)
	os.Chmod(accountSeed, 0o644)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"insecure account seed", []string{"auth", "creds", "--dir", dir, "--account-seed", accountSeed}, exitUsage, "chmod 600 " + accountSeed},
		{"user seed as account", []string{"auth", "creds", "--dir", dir, "--account-seed", userSeed}, exitUsage, "not an account key"},
		{"no account seed", []string{"auth", "creds", "--dir", dir}, exitUsage, "--account-seed is required"},
		{"missing account seed", []string{"auth", "creds", "--dir", dir, "--account-seed", filepath.Join(dir, "nope")}, exitUsage, "no such file"},
		{"bad issuer", []string{"auth", "creds", "--dir", dir, "--account-seed", otherFile, "--issuer-account", "AXYZ"}, exitUsage, "not an account public key"},
	} {
		st, _, errOut := runCLI(tc.args...)
		if st != tc.status || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", tc.name, st, tc.status, errOut, tc.stderr)
		}
	}
}
