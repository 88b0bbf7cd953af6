package test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// TestServeProberSettlesKilledPayment: `jingwei serve` runs a prober by
// default. A tool worker (a process of its own) charges a payment and is
// SIGKILLed before its result; the recovery worker takes the session over
// and assesses the call uncertain / needs_review; serve's prober raises
// the ledger's fence, finds the charge and signs completed with its own
// key. `jingwei status --call` shows the review as a probe's, and `jingwei
// retry` is refused completed: nobody reviewed, nothing is charged twice.
func TestServeProberSettlesKilledPayment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := buildJingwei(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := startServe(t, bin, "--no-worker", "--lease-ttl", pipelineLeaseTTL)
	url, auth := srv.url, srv.auth()
	// The prober connects as a role of its own, whose key serve created
	// next to the others.
	if _, err := access.KeyDir(auth).KeyPair(access.RoleProber); err != nil {
		t.Fatalf("serve's prober role key: %v", err)
	}
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: access.KeyDir(auth).SeedFile(access.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	anc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: access.KeyDir(auth).SeedFile(access.RoleAgent)})
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	agentJS, _ := jetstream.New(anc)
	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}

	procs := &processes{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(procs.killAll)
	w := procs.start("worker", "worker", "--server", url, "--auth", auth, "--owner", "tw-p", "--lease-ttl", pipelineLeaseTTL, "--tool-delay-after", "1m")
	const session = "probe-pay"
	publishRequest(t, agentJS, topo, session, "r-pay-1", tools.PaymentsCharge, `{"account":"acct-1","amount_cents":700}`)
	streamtest.Eventually(t, waitLimit, "the payment is charged (its result held back)", func() bool {
		l, err := tl.Ledger(ctx)
		return err == nil && len(l) == 1
	})
	w.kill()
	l, _ := tl.Ledger(ctx)
	callID := l[0].CallID

	var st struct {
		Status service.Status `json:"status"`
	}
	streamtest.Eventually(t, waitLimit, "status shows the probe's completed review deciding the call", func() bool {
		out, err := exec.Command(bin, "status", "--server", url, "--auth", auth, "--session", session, "--call", callID, "--json").Output()
		if err != nil || json.Unmarshal(out, &st) != nil {
			return false
		}
		for _, c := range st.Status.Reviews {
			if c.Accepted && c.Decides && c.Source == "probe" {
				return true
			}
		}
		return false
	})
	var rv schema.Review
	for _, c := range st.Status.Reviews {
		if c.Decides {
			rv = c.Review
		}
	}
	if rv.Verdict != schema.VerdictCompleted || rv.Probe != tools.PaymentsLookup || !strings.Contains(rv.Evidence, "found") {
		t.Fatalf("deciding review %+v: want payments.lookup's completed", rv)
	}
	// The table says so too.
	out, _ := exec.Command(bin, "status", "--server", url, "--auth", auth, "--session", session, "--call", callID).CombinedOutput()
	if !strings.Contains(string(out), "probe payments.lookup") || !strings.Contains(string(out), "decides") {
		t.Fatalf("status table does not show the probe's review:\n%s", out)
	}
	// No retry: completed.
	out, err = exec.Command(bin, "retry", "--server", url, "--auth", auth, "--session", session, "--call", callID).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "completed") {
		t.Fatalf("retry after the probe's completed: %v\n%s", err, out)
	}
	if l, _ := tl.Ledger(ctx); len(l) != 1 {
		t.Fatalf("ledger %+v: want the one charge", l)
	}
}
