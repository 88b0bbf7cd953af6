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
// nats 2.11 or newer, a recovery worker and two tool workers built from
// deploy/Dockerfile, configured only through flags and environment, with
// replicas 3 and flags the binary accepts.
func TestComposeFile(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	p := loadCompose(t, map[string]string{"JINGWEI_REVIEWER_KEYS": pub})

	// The NATS cluster.
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	var clusterName string
	for _, name := range nodes {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		checkNATSImage(t, name, s.Image)
		cmd := strings.Join(s.Command, " ")
		if !strings.Contains(cmd, "--jetstream") && !strings.Contains(cmd, "-js") {
			t.Errorf("%s: JetStream is not enabled: %s", name, cmd)
		}
		cn := flagValue(s.Command, "--cluster_name")
		if cn == "" || clusterName != "" && cn != clusterName {
			t.Errorf("%s: cluster name %q, want one name for all nodes", name, cn)
		}
		clusterName = cn
		routes := flagValue(s.Command, "--routes")
		for _, other := range nodes {
			if !strings.Contains(routes, "nats://"+other+":6222") {
				t.Errorf("%s: routes %q miss %s", name, routes, other)
			}
		}
		if flagValue(s.Command, "--store_dir") == "" || len(s.Volumes) == 0 {
			t.Errorf("%s: JetStream store is not on a volume", name)
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no healthcheck (the workers wait for a healthy cluster)", name)
		}
	}

	// The jingwei services.
	want := map[string]string{"recover": "recover", "worker-1": "worker", "worker-2": "worker"}
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
		}
		for _, node := range nodes {
			if d, ok := s.DependsOn[node]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: does not wait for %s to be healthy", name, node)
			}
		}
		if len(s.Volumes) > 0 || s.EnvFiles != nil {
			t.Errorf("%s: configured by files (volumes %v, env files %v); flags and environment only", name, s.Volumes, s.EnvFiles)
		}
		if command == "worker" {
			o := flagValue(s.Command, "--owner")
			if o == "" || owners[o] {
				t.Errorf("%s: --owner %q must be set and unique", name, o)
			}
			owners[o] = true
		}
	}

	// The trusted reviewers come from the environment.
	rec := p.Services["recover"]
	trust := flagValue(rec.Command, "--trust-reviewers")
	var mounted bool
	for _, c := range rec.Configs {
		if c.Target == trust {
			mounted = true
			cfg, ok := p.Configs[c.Source]
			if !ok || !strings.Contains(cfg.Content, pub) {
				t.Errorf("config %s does not carry $JINGWEI_REVIEWER_KEYS: %+v", c.Source, cfg)
			}
		}
	}
	if trust == "" || !mounted {
		t.Errorf("recover: --trust-reviewers %q is not the target of a config", trust)
	}

	// The Dockerfile builds this module's binary with this module's Go.
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

	// Every jingwei command line in the file is accepted by the binary:
	// with --help appended, flag parsing stops after the given flags and
	// fails on any the command does not know.
	bin := jingweiBinary(t)
	for _, name := range []string{"recover", "worker-1", "worker-2"} {
		args := append(append([]string{}, p.Services[name].Command...), "--help")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: jingwei %s: %v\n%s", name, strings.Join(args, " "), err, firstLines(string(out), 3))
		}
	}
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
