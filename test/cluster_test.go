package test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/ports"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// freePorts returns n free TCP ports on loopback, outside the ephemeral
// range (the servers bind them after the check).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	p, err := ports.Free(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startCluster starts a 3-node JetStream cluster on loopback in this
// process and returns its nodes by server name.
func startCluster(t *testing.T) map[string]*natsnode.Embedded {
	t.Helper()
	ctx := context.Background()
	routePorts := freePorts(t, 3)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	nodes := map[string]*natsnode.Embedded{}
	type started struct {
		e   *natsnode.Embedded
		err error
	}
	ch := make(chan started, 3)
	for i := range 3 {
		go func() {
			name := fmt.Sprintf("jw-%d", i)
			e, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{
				Dir: t.TempDir(), Listen: "127.0.0.1:-1", Name: name, Sync: natsnode.SyncInterval,
				ReadyTimeout: 20 * time.Second,
				Options: func(o *server.Options) {
					o.Cluster = server.ClusterOpts{Name: "jw-test", Host: "127.0.0.1", Port: routePorts[i]}
					o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
				},
			})
			ch <- started{e, err}
		}()
	}
	for range 3 {
		s := <-ch
		if s.err != nil {
			t.Fatal(s.err)
		}
		nodes[s.e.Server().Name()] = s.e
		t.Cleanup(s.e.Shutdown)
	}
	return nodes
}

// ensureR3 creates the R3 topology on a cluster, retrying while the meta
// leader is not elected yet (a few seconds after the servers are up),
// until ctx ends.
func ensureR3(ctx context.Context, t *testing.T, js jetstream.JetStream) *stream.Topology {
	t.Helper()
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		topo, err := stream.EnsureTopology(actx, js, stream.TopologyConfig{Replicas: 3})
		acancel()
		if err == nil {
			return topo
		}
		select {
		case <-ctx.Done():
			t.Fatalf("R3 topology: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestClusterLeaderLossKeepsLog runs a fenced writer on an R3 topology,
// shuts down the JW_EVENTS leader while it appends, and checks afterwards
// that every acknowledged event is on the log exactly once, that no event
// appears twice, and that fencing still holds: a takeover fences the writer,
// which then gets ErrFenced.
func TestClusterLeaderLossKeepsLog(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	nodes := startCluster(t)
	var urls []string
	for _, e := range nodes {
		urls = append(urls, e.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: strings.Join(urls, ","), ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo := ensureR3(ctx, t, js)

	lease, err := topo.Leases().AcquireLease(ctx, "s-1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := topo.Logs().Fence(ctx, "s-1", "w1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		call string
		seq  uint64
		err  error
	}
	results := make(chan outcome, 1024)
	stop := make(chan struct{})
	halfway := make(chan struct{})
	resume := make(chan struct{})
	go func() {
		defer close(results)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			call := fmt.Sprintf("c-%d", i)
			seq, err := w.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: call}})
			results <- outcome{call, seq, err}
			if i == 50 {
				// Pause while the leader goes down, so that every later
				// append runs against the changed cluster.
				close(halfway)
				<-resume
			}
			if errors.Is(err, stream.ErrFenced) || errors.Is(err, stream.ErrConflict) || ctx.Err() != nil {
				return
			}
		}
	}()

	<-halfway
	info, err := topo.Events.Info(ctx)
	if err != nil || info.Cluster == nil || nodes[info.Cluster.Leader] == nil {
		t.Fatalf("stream leader: %+v %v", info, err)
	}
	leader := info.Cluster.Leader
	nodes[leader].Shutdown()
	t.Logf("shut down stream leader %s", leader)
	close(resume)

	// Keep appending until 100 more events were acknowledged after the
	// shutdown (the stream needs a new leader for that).
	acked := map[string]uint64{}
	var afterLoss, failed int
	for r := range results {
		if r.err != nil {
			failed++
			t.Logf("append %s: %v", r.call, r.err)
			if errors.Is(r.err, stream.ErrFenced) || errors.Is(r.err, stream.ErrConflict) {
				t.Fatalf("writer stopped: %v", r.err)
			}
			continue
		}
		acked[r.call] = r.seq
		if len(acked) > 51 {
			afterLoss++
		}
		if afterLoss == 100 {
			close(stop)
		}
	}
	t.Logf("%d acknowledged, %d failed", len(acked), failed)

	// A takeover on the new leader fences the writer.
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Right after a leader change a replica may still show the released
	// lease for a moment (stale reads are allowed; the create itself is a
	// compare-and-set): retry, as a recovery worker would.
	var lease2 *stream.Lease
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if lease2, err = topo.Leases().AcquireLease(ctx, "s-1", "w2"); err == nil {
			break
		}
		if !errors.Is(err, stream.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if _, err := topo.Logs().Fence(ctx, "s-1", "w2", lease2.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "late"}}); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("old writer after takeover: %v", err)
	}

	evs, err := topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	for _, ev := range evs {
		if ev.Type != schema.TypeStarted {
			continue
		}
		if prev, dup := seen[ev.CallID()]; dup {
			t.Fatalf("%s stored twice (seq %d and %d)", ev.CallID(), prev, ev.Seq)
		}
		seen[ev.CallID()] = ev.Seq
		if ev.CallID() == "late" {
			t.Fatal("fenced writer's late event is on the log")
		}
	}
	for call, seq := range acked {
		if seen[call] != seq {
			t.Fatalf("acknowledged %s at seq %d, log has it at %d", call, seq, seen[call])
		}
	}
	if afterLoss < 100 {
		t.Fatalf("only %d appends acknowledged after the leader loss", afterLoss)
	}
	if info, err := topo.Events.Info(ctx); err != nil || info.Cluster == nil || info.Cluster.Leader == leader || info.Cluster.Leader == "" {
		t.Fatalf("stream leader after the loss: %+v %v", info.Cluster, err)
	}
}

// TestClusterReadOnlyCommands runs the read-only commands (export,
// inspect) against an R3 deployment with their default flags: a reader
// works against any deployment, single node or cluster, and never needs
// to be told its replicas.
func TestClusterReadOnlyCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	bin := jingweiBinary(t)
	nodes := startCluster(t)
	var urls []string
	for _, e := range nodes {
		urls = append(urls, e.ClientURL())
	}
	url := strings.Join(urls, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo := ensureR3(ctx, t, js)
	lg, err := topo.Logs().Fence(ctx, "ro-1", "test-writer", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-ro-1", Tool: "catalog.lookup", Arguments: []byte(`{"sku":"A-1"}`),
			StartMarker: true, Operation: &schema.Operation{Task: "t-1", Key: "op-ro-1", Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "1"}}}},
		{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-ro-1"}},
		{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-ro-1", Status: schema.StatusOK, Output: []byte(`{"price_cents":100}`)}},
	} {
		if _, err := lg.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	r := jw(t, bin, url, "export", "--session", "ro-1")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 4 || !strings.Contains(r.stdout, `"c-ro-1"`) {
		t.Fatalf("export against R3: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = jw(t, bin, url, "inspect", "--session", "ro-1", "--call", "c-ro-1")
	if r.code != 0 || !strings.Contains(r.stdout, `"outcome":"completed"`) {
		t.Fatalf("inspect against R3: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
