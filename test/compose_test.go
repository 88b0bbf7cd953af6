package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// loadCompose loads docker-compose.yml with the maintained compose-spec
// loader (schema validation, interpolation, normalization: what `docker
// compose config` does), every profile enabled.
func loadCompose(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "docker-compose.yml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: file, Content: b}},
		Environment: env,
	}, func(o *loader.Options) {
		o.SetProjectName("jingwei", true)
		o.Profiles = []string{"*"}
	})
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// TestComposeFile checks docker-compose.yml: a 3-node JetStream cluster of
// nats 2.11 or newer whose configuration includes the jingwei accounts, a
// one-shot auth service that writes the role keys and that accounts block,
// a one-shot setup that creates the topology as admin, a recovery worker and
// two tool workers built from deploy/Dockerfile connecting with their role
// keys, with replicas 3 and flags the binary accepts. The NATS
// configuration it renders, with an accounts block made by the jingwei
// binary, loads in nats-server.
func TestComposeFile(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	kp2, _ := nkeys.CreateUser()
	pub2, _ := kp2.PublicKey()
	p := loadCompose(t, map[string]string{"JINGWEI_REVIEWER_KEYS": pub + " " + pub2})

	// The one-shot auth service writes the keys and the accounts block.
	auth, ok := p.Services["auth"]
	if !ok {
		t.Fatal("no service auth")
	}
	authCmd := strings.Join(auth.Command, " ")
	for _, want := range []string{"jingwei auth init --dir /auth", "jingwei auth config --dir /auth > /auth/accounts.conf"} {
		if !strings.Contains(authCmd, want) {
			t.Errorf("auth: command %q lacks %q", authCmd, want)
		}
	}
	if !mounts(auth, "auth", "/auth", false) {
		t.Errorf("auth: the auth volume is not mounted writable at /auth: %+v", auth.Volumes)
	}

	// The NATS cluster.
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	var conf string
	for _, name := range nodes {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		checkNATSImage(t, name, s.Image)
		cfgFile := flagValue(s.Command, "--config")
		var mounted bool
		for _, c := range s.Configs {
			if c.Target == cfgFile {
				mounted = true
				conf = p.Configs[c.Source].Content
			}
		}
		if cfgFile != "/jingwei.conf" || !mounted {
			t.Errorf("%s: --config %q is not the target of a config", name, cfgFile)
		}
		if flagValue(s.Command, "--name") != name {
			t.Errorf("%s: --name is not %s", name, name)
		}
		if flagValue(s.Command, "--store_dir") == "" || !mounts(s, name, flagValue(s.Command, "--store_dir"), false) {
			t.Errorf("%s: JetStream store is not on a volume", name)
		}
		if !mounts(s, "auth", "/auth", true) {
			t.Errorf("%s: the auth volume is not mounted read-only at /auth", name)
		}
		if d, ok := s.DependsOn["auth"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: does not wait for the auth service", name)
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no healthcheck (the workers wait for a healthy cluster)", name)
		}
	}
	for _, want := range []string{"jetstream", "cluster", "include auth/accounts.conf"} {
		if !strings.Contains(conf, want) {
			t.Errorf("NATS configuration lacks %q:\n%s", want, conf)
		}
	}
	for _, other := range nodes {
		if !strings.Contains(conf, "nats://"+other+":6222") {
			t.Errorf("NATS configuration: routes miss %s", other)
		}
	}
	// The configuration loads in nats-server with a real accounts block.
	bin := jingweiBinary(t)
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if out, err := exec.Command(bin, "auth", "init", "--dir", authDir).CombinedOutput(); err != nil {
		t.Fatalf("auth init: %v\n%s", err, out)
	}
	block, err := exec.Command(bin, "auth", "config", "--dir", authDir).Output()
	if err != nil {
		t.Fatalf("auth config: %v", err)
	}
	if err := os.WriteFile(filepath.Join(authDir, "accounts.conf"), block, 0o644); err != nil {
		t.Fatal(err)
	}
	// As in the containers: the configuration beside the auth directory
	// (/jingwei.conf and /auth), its include relative to it.
	confFile := filepath.Join(dir, "jingwei.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(confFile)
	if err != nil {
		t.Fatalf("the NATS configuration does not load: %v", err)
	}
	if !opts.JetStream || opts.Cluster.Name == "" || len(opts.Routes) != 3 || len(opts.Nkeys) != len(access.Roles) {
		t.Fatalf("NATS configuration: jetstream %t, cluster %q, %d routes, %d nkey users; want jetstream, a cluster, 3 routes, one user per role",
			opts.JetStream, opts.Cluster.Name, len(opts.Routes), len(opts.Nkeys))
	}

	// The jingwei services, setup included.
	want := map[string]string{"setup": "setup", "recover": "recover", "worker-1": "worker", "worker-2": "worker"}
	owners := map[string]bool{}
	for name, command := range want {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: not built from deploy/Dockerfile: %+v", name, s.Build)
		}
		if len(s.Command) == 0 || s.Command[0] != command {
			t.Errorf("%s: command %v, want %s …", name, s.Command, command)
		}
		if got := flagValue(s.Command, "--replicas"); got != "3" {
			t.Errorf("%s: --replicas %q, want 3 (R3 streams and buckets)", name, got)
		}
		url := s.Environment["NATS_URL"]
		for _, node := range nodes {
			if url == nil || !strings.Contains(*url, "nats://"+node+":4222") {
				t.Errorf("%s: NATS_URL does not list %s: %v", name, node, url)
			}
			if d, ok := s.DependsOn[node]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: does not wait for %s to be healthy", name, node)
			}
		}
		if a := s.Environment["JINGWEI_AUTH"]; a == nil || *a != "/auth" || !mounts(s, "auth", "/auth", true) {
			t.Errorf("%s: does not connect with its role key from the auth volume (JINGWEI_AUTH /auth, mounted read-only)", name)
		}
		if s.EnvFiles != nil {
			t.Errorf("%s: configured by env files %v; flags and environment only", name, s.EnvFiles)
		}
		if name != "setup" {
			if d, ok := s.DependsOn["setup"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s: does not wait for setup to create the topology", name)
			}
		}
		if command == "worker" {
			o := flagValue(s.Command, "--owner")
			if o == "" || owners[o] {
				t.Errorf("%s: --owner %q must be set and unique", name, o)
			}
			owners[o] = true
		}
	}

	// The trusted reviewers come from the environment, in the format its
	// comment documents (white-space separated).
	rec := p.Services["recover"]
	trust := flagValue(rec.Command, "--trust-reviewers")
	var mounted bool
	for _, c := range rec.Configs {
		if c.Target == trust {
			mounted = true
			cfg, ok := p.Configs[c.Source]
			keys, err := recovery.ParseTrustedKeys([]byte(cfg.Content))
			if !ok || err != nil || !keys.Has(pub) || !keys.Has(pub2) {
				t.Errorf("config %s does not carry both keys of $JINGWEI_REVIEWER_KEYS: %+v %v", c.Source, cfg, err)
			}
		}
	}
	if trust == "" || !mounted {
		t.Errorf("recover: --trust-reviewers %q is not the target of a config", trust)
	}

	// The Dockerfile builds this module's binary with this module's Go,
	// and gives the jingwei user a private /auth.
	df, err := os.ReadFile(filepath.Join("..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || !strings.Contains(string(df), "FROM golang:"+string(m[1])) {
		t.Errorf("deploy/Dockerfile does not build with go %s (go.mod)", m[1])
	}
	if !strings.Contains(string(df), "./cmd/jingwei") {
		t.Error("deploy/Dockerfile does not build ./cmd/jingwei")
	}
	if !strings.Contains(string(df), "chmod 700 /auth") {
		t.Error("deploy/Dockerfile does not make /auth private to the jingwei user")
	}

	// Every jingwei command line in the file is accepted by the binary:
	// with --help appended, flag parsing stops after the given flags and
	// fails on any the command does not know.
	for name := range want {
		args := append(append([]string{}, p.Services[name].Command...), "--help")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: jingwei %s: %v\n%s", name, strings.Join(args, " "), err, firstLines(string(out), 3))
		}
	}
}

// mounts reports whether s mounts the volume (or bind) source at target,
// read-only when ro.
func mounts(s types.ServiceConfig, source, target string, ro bool) bool {
	for _, v := range s.Volumes {
		if v.Source == source && v.Target == target && v.ReadOnly == ro {
			return true
		}
	}
	return false
}

// TestComposeRejectsBrokenFile makes sure the loader used above does
// validate: a file with a misspelt key fails to load.
func TestComposeRejectsBrokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "docker-compose.yml")
	broken := "services:\n  a:\n    image: nats:2.11-alpine\n    comand: [\"-js\"]\n"
	if err := os.WriteFile(file, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: dir, ConfigFiles: []types.ConfigFile{{Filename: file, Content: []byte(broken)}},
	}, func(o *loader.Options) { o.SetProjectName("x", true) })
	if err == nil {
		t.Fatal("a compose file with an unknown key loaded without error")
	}
}

// checkNATSImage checks that image is nats with a version tag of 2.11 or
// newer.
func checkNATSImage(t *testing.T, service, image string) {
	t.Helper()
	m := regexp.MustCompile(`^nats:(\d+)\.(\d+)`).FindStringSubmatch(image)
	if m == nil {
		t.Errorf("%s: image %q is not nats:<major>.<minor>…", service, image)
		return
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 2 || major == 2 && minor < 11 {
		t.Errorf("%s: image %q is older than nats 2.11 (per-message TTLs for leases)", service, image)
	}
}

// flagValue returns the value after flag in args ("--f v" or "--f=v").
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
