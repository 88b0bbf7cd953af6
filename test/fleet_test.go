package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

// fleetLeaseTTL is the lease TTL of every process of the fleet test.
const fleetLeaseTTL = 2 * time.Second

// TestFleetChurn is the churn test: tool worker processes share the
// partitions while requests of many sessions keep coming; one worker is
// SIGKILLed and another joins. Every request becomes exactly one tool.call,
// in publish order per session; the consumers on the request queue never
// outnumber the partitions; after the churn no consumer, lease or
// registration of the killed worker is left, and once the others stop
// (SIGTERM) nothing at all.
func TestFleetChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := buildJingwei(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	reviewer, _ := nkeys.CreateUser()
	pub, _ := reviewer.PublicKey()
	trustFile := filepath.Join(t.TempDir(), "trusted-reviewers")
	if err := os.WriteFile(trustFile, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ttl := fleetLeaseTTL.String()
	srv := startServe(t, bin, "--no-worker", "--no-prober", "--lease-ttl", ttl, "--trust-reviewers", trustFile)
	auth := srv.auth()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: access.KeyDir(auth).SeedFile(access.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	agentNC, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: srv.url, NKeySeedFile: access.KeyDir(auth).SeedFile(access.RoleAgent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agentNC.Close)
	agentJS, _ := jetstream.New(agentNC)

	procs := &processes{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(procs.killAll)
	worker := func(owner string) *process {
		return procs.start(owner, "worker", "--server", srv.url, "--auth", auth, "--owner", owner, "--lease-ttl", ttl, "--tool-delay", "30ms", "--log-format", "json")
	}
	a, b := worker("tw-a"), worker("tw-b")

	consumers := func() []string {
		var names []string
		for name := range topo.Requests.ConsumerNames(ctx).Name() {
			names = append(names, name)
		}
		return names
	}
	maxConsumers := 0
	sample := func() {
		if n := len(consumers()); n > maxConsumers {
			maxConsumers = n
		}
	}
	streamtest.Eventually(t, waitLimit, "both workers own partitions", func() bool {
		owners := partitionOwners(t, topo)
		return owners["tw-a"] > 0 && owners["tw-b"] > 0
	})

	const sessions, rounds = 24, 12
	var c *process
	for n := range rounds {
		for i := range sessions {
			s := fmt.Sprintf("fleet-%d", i)
			publishRequest(t, agentJS, topo, s, fmt.Sprintf("r-%s-%02d", s, n), tools.CatalogLookup, fmt.Sprintf(`{"sku":"A-%d"}`, n))
		}
		sample()
		switch n {
		case 4:
			a.kill() // SIGKILL: its leases, consumers and registration are left to expire
		case 7:
			c = worker("tw-c")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(150 * time.Millisecond): // pacing of the agents, not a wait for a condition
		}
	}

	// Every request became exactly one tool.call, in publish order.
	streamtest.Eventually(t, 2*waitLimit, "every request recorded and the queue empty", func() bool {
		sample()
		if info, err := topo.Requests.Info(ctx); err != nil || info.State.Msgs != 0 {
			return false
		}
		for i := range sessions {
			if len(sessionCalls(t, topo, fmt.Sprintf("fleet-%d", i))) < rounds {
				return false
			}
		}
		return true
	})
	fenceOwners := map[string]bool{}
	for i := range sessions {
		s := fmt.Sprintf("fleet-%d", i)
		var ids []string
		for _, ev := range sessionEvents(t, topo, s) {
			if ev.Fence != nil {
				fenceOwners[ev.Fence.Owner] = true
			}
		}
		for _, call := range sessionCalls(t, topo, s) {
			ids = append(ids, call.RequestID)
		}
		want := make([]string, rounds)
		for n := range want {
			want[n] = fmt.Sprintf("r-%s-%02d", s, n)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s: tool.calls for %v, want each request once in publish order %v", s, ids, want)
		}
	}
	if !fenceOwners["tw-a"] || !fenceOwners["tw-b"] {
		t.Errorf("fences by %v: both first workers should have written sessions", fenceOwners)
	}
	t.Logf("%d requests of %d sessions, fenced by %v; at most %d consumers on JW_REQUESTS", sessions*rounds, sessions, fenceOwners, maxConsumers)
	if maxConsumers > topo.Names().Partitions() {
		t.Errorf("up to %d consumers on JW_REQUESTS, more than the %d partitions", maxConsumers, topo.Names().Partitions())
	}

	// After the churn: the killed worker left nothing, the newcomer owns
	// its share, every partition is owned.
	streamtest.Eventually(t, waitLimit, "partitions rebalanced over tw-b and tw-c", func() bool {
		owners := partitionOwners(t, topo)
		live, err := topo.Leases().LiveWorkers(ctx)
		return err == nil && slices.Equal(live, []string{"tw-b", "tw-c"}) &&
			owners["tw-a"] == 0 && owners["tw-b"] == topo.Names().Partitions()/2 && owners["tw-c"] == topo.Names().Partitions()/2
	})
	if n := len(consumers()); n > topo.Names().Partitions() {
		t.Errorf("%d request consumers after the churn, want at most %d", n, topo.Names().Partitions())
	}
	for _, name := range consumers() {
		ci, err := topo.Requests.Consumer(ctx, name)
		if err != nil {
			continue
		}
		if d := ci.CachedInfo().Config.Description; strings.Contains(d, "tw-a") {
			t.Errorf("consumer %s of the killed worker left (%s)", name, d)
		}
	}

	// Both stop: they drain and give everything back.
	for _, p := range []*process{b, c} {
		if code := p.terminate(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", p.name, code)
		}
	}
	if n := len(consumers()); n != 0 {
		t.Errorf("%d request consumers after every worker stopped, want 0: %v", n, consumers())
	}
	if leases, err := topo.Leases().PartitionLeases(ctx); err != nil || len(leases) != 0 {
		t.Errorf("partition leases after every worker stopped: %v %v, want none", leases, err)
	}
	if live, err := topo.Leases().LiveWorkers(ctx); err != nil || len(live) != 0 {
		t.Errorf("registrations after every worker stopped: %v %v, want none", live, err)
	}
	// Plan consumers are kept for the next owner's ack floor and removed
	// by the server once nobody pulls (InactiveThreshold, 3 TTL + 5 s).
	streamtest.Eventually(t, 5*fleetLeaseTTL+15*time.Second, "plan consumers gone", func() bool {
		n := 0
		for range topo.PlanLog.ConsumerNames(ctx).Name() {
			n++
		}
		return n == 0
	})
}

// partitionOwners counts the live partition leases by owner.
func partitionOwners(t *testing.T, topo *stream.Topology) map[string]int {
	t.Helper()
	leases, err := topo.Leases().PartitionLeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, lv := range leases {
		out[lv.Owner]++
	}
	return out
}
