package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/mcptool/mcptest"
)

// buildMCPTestServer builds package mcptest's stdio MCP server.
func buildMCPTestServer(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "mcptestserver")
	cmd := exec.Command("go", "build", "-o", bin, "./worker/mcptool/mcptest/mcptestserver")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// mcpCatalog writes a catalog of the test MCP server's put (idempotent)
// and charge (non-idempotent), the server holding every write for hold.
func mcpCatalog(t *testing.T, server, natsURL, seed string, hold time.Duration) string {
	t.Helper()
	doc := fmt.Sprintf(`version: 1
servers:
  ledger:
    command: %q
    env: {MCPTEST_NATS: %q, MCPTEST_NKEY: %q, MCPTEST_PREFIX: mcpledger, MCPTEST_HOLD: %q}
tools:
  - name: ledger.put
    mcp: {server: ledger, tool: put}
    contract: {effect: idempotent, revision: put-v1}
  - name: ledger.charge
    mcp: {server: ledger, tool: charge}
    contract: {effect: non_idempotent, revision: charge-v1}
`, server, natsURL, seed, hold.String())
	f := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMCPWorkerKilledMidToolsCall: a tool worker running the tools of an
// MCP server (stdio, writing a fenced JetStream ledger) is killed with
// SIGKILL while the server holds both calls after their write. Both
// calls are uncertain; the idempotent put is retried through a plan, whose
// tools/call reaches the (new) server with the same operation key and
// finds the entry — one effect —, and the non-idempotent charge needs a
// review: no plan, one charge.
func TestMCPWorkerKilledMidToolsCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs processes")
	}
	bin := buildJingwei(t)
	server := buildMCPTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	srv := startServe(t, bin, "--no-worker", "--lease-ttl", pipelineLeaseTTL)
	url, auth := srv.url, srv.auth()
	connect := func(r access.Role) (*nats.Conn, jetstream.JetStream, *stream.Topology) {
		t.Helper()
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: access.KeyDir(auth).SeedFile(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return nc, js, topo
	}
	_, js, topo := connect(access.RoleAdmin)
	_, agentJS, _ := connect(access.RoleAgent)
	hostNC, _, _ := connect(access.RoleHost)
	ledger, err := mcptest.NewLedger(ctx, js, "mcpledger")
	if err != nil {
		t.Fatal(err)
	}
	seed := access.KeyDir(auth).SeedFile(access.RoleAdmin)

	procs := &processes{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(procs.killAll)
	workerA := procs.start("worker-a", "worker", "--server", url, "--auth", auth, "--owner", "tw-a", "--lease-ttl", pipelineLeaseTTL,
		"--tools", mcpCatalog(t, server, url, seed, time.Minute))

	publishRequest(t, agentJS, topo, "m-put", "r-put-1", "ledger.put", `{"amount":5}`)
	publishRequest(t, agentJS, topo, "m-charge", "r-charge-1", "ledger.charge", `{"amount":7}`)
	streamtest.Eventually(t, waitLimit, "both writes on the ledger, the server holding the answers", func() bool {
		puts, err1 := ledger.Count(ctx, "mcpledger.put.>")
		charges, err2 := ledger.Count(ctx, ledger.ChargeSubject("m-charge"))
		return err1 == nil && err2 == nil && puts == 1 && charges == 1
	})
	procs.start("worker-b", "worker", "--server", url, "--auth", auth, "--owner", "tw-b", "--lease-ttl", pipelineLeaseTTL,
		"--tools", mcpCatalog(t, server, url, seed, 0))
	workerA.kill()

	crashed := map[string]*schema.Call{}
	for s, rid := range map[string]string{"m-put": "r-put-1", "m-charge": "r-charge-1"} {
		cs := callsWithRequest(t, topo, s, rid)
		if len(cs) != 1 || resultFor(t, topo, s, cs[0].CallID) {
			t.Fatalf("%s: call %+v should be open", s, cs)
		}
		crashed[s] = cs[0]
	}
	streamtest.Eventually(t, waitLimit, "the crashed calls assessed uncertain", func() bool {
		for s, want := range map[string]schema.Decision{"m-put": schema.DecisionRetryAllowed, "m-charge": schema.DecisionNeedsReview} {
			a, ok := assessmentOf(t, js, topo, s, crashed[s].CallID)
			if !ok {
				return false
			}
			if a.Outcome != schema.OutcomeUncertain || a.Decision != want {
				t.Fatalf("%s: assessment %+v, want uncertain and %s", s, a, want)
			}
		}
		return true
	})

	api := &apiClient{t: t, nc: hostNC}
	plan := api.prepareOK(ctx, "m-put", crashed["m-put"].CallID)
	if plan.Key != crashed["m-put"].Operation.Key {
		t.Fatalf("plan %+v", plan)
	}
	// Worker B runs the plan: a new call with the same operation key,
	// whose tools/call the server deduplicates.
	var retry *schema.Call
	streamtest.Eventually(t, waitLimit, "the plan's call has its result", func() bool {
		for _, c := range sessionCalls(t, topo, "m-put") {
			if c.CallID != crashed["m-put"].CallID && resultFor(t, topo, "m-put", c.CallID) {
				retry = c
				return true
			}
		}
		return false
	})
	if retry.Operation.Key != crashed["m-put"].Operation.Key {
		t.Fatalf("retry key %q, crashed %q", retry.Operation.Key, crashed["m-put"].Operation.Key)
	}
	if st := statusOf(t, topo, "m-put", retry.CallID); st != schema.StatusOK {
		t.Fatalf("retry status %s", st)
	}
	for _, ev := range sessionEvents(t, topo, "m-put") {
		if ev.Result != nil && ev.Result.CallID == retry.CallID {
			var out map[string]any
			if err := json.Unmarshal(ev.Result.Output, &out); err != nil || out["dup"] != true {
				t.Fatalf("retry output %s: want the server's dedupe (dup true)", ev.Result.Output)
			}
		}
	}
	if n, _ := ledger.Count(ctx, "mcpledger.put.>"); n != 1 {
		t.Fatalf("ledger holds %d puts, want 1", n)
	}
	// The charge: needs_review, never planned, never run again.
	api.prepareRefused(ctx, "m-charge", crashed["m-charge"].CallID, "needs_review")
	if n, _ := ledger.Count(ctx, ledger.ChargeSubject("m-charge")); n != 1 {
		t.Fatalf("ledger holds %d charges, want 1", n)
	}
	if cs := sessionCalls(t, topo, "m-charge"); len(cs) != 1 {
		t.Fatalf("m-charge has %d calls, want 1", len(cs))
	}
}
