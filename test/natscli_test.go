package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// TestNatsCLIRoles is the check the README tells an operator to run, with
// the real nats CLI (natscli) against `jingwei serve`: the agent's key
// cannot publish on a session log (the server refuses it), and the host's
// key lists the jingwei service with `nats micro ls`. .ci/run installs
// natscli and points JINGWEI_NATS_CLI at it; without it (a developer
// machine) the test is skipped.
func TestNatsCLIRoles(t *testing.T) {
	cli := os.Getenv("JINGWEI_NATS_CLI")
	if cli == "" {
		t.Skip("JINGWEI_NATS_CLI is not set (.ci/run installs natscli and sets it)")
	}
	bin := jingweiBinary(t)
	srv := startServe(t, bin, "--no-worker")
	nats := func(role access.Role, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		all := append([]string{"--server", srv.url, "--nkey", access.KeyDir(srv.auth()).SeedFile(role)}, args...)
		out, err := exec.CommandContext(ctx, cli, all...).CombinedOutput()
		return string(out), err
	}
	out, err := nats(access.RoleAgent, "pub", "jw.events.x", `{}`)
	if err == nil || !strings.Contains(out, `Permissions Violation for Publish to "jw.events.x"`) {
		t.Fatalf("nats pub jw.events.x as agent: %v\n%s", err, out)
	}
	// The prober role reaches what its probes read and fence and the
	// reviews, never a service or a session log.
	for _, subj := range []string{"jw.api.call", "jw.events.x", "jw.approvals.x"} {
		out, err = nats(access.RoleProber, "pub", subj, `{}`)
		if err == nil || !strings.Contains(out, `Permissions Violation for Publish to "`+subj+`"`) {
			t.Fatalf("nats pub %s as prober: %v\n%s", subj, err, out)
		}
	}
	out, err = nats(access.RoleHost, "micro", "ls")
	if err != nil || !strings.Contains(out, "jingwei") {
		t.Fatalf("nats micro ls as host: %v\n%s", err, out)
	}
	// Nothing reached the session log.
	ctx := context.Background()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: filepath.Join(srv.auth(), "admin.nk")})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := topo.Logs().Load(ctx, "x"); err != nil || len(h) != 0 {
		t.Fatalf("session x holds %d events (%v), want none", len(h), err)
	}
}
