package test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestGatewayCallDuringRequestsLeaderLoss: the node that leads JW_REQUESTS
// is shut down and at once an agent calls jw.api.call through a gateway
// connected to a surviving node. The publish of the request reaches the
// stream while its leader is being elected; it must be sent again in place
// (docs/protocol.md §7 "Requests during an election are re-sent, not
// waited out") so that, within the gateway's call timeout, the request is
// stored on the work queue and the call answers result_pending (no tool
// worker runs here) — not an internal error for a request that was never
// stored, after a single publish attempt.
func TestGatewayCallDuringRequestsLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	nodes := startCluster(t)
	var any *natsnode.Embedded
	for _, e := range nodes {
		any = e
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	nc0, err := any.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc0.Close()
	js0, _ := jetstream.New(nc0)
	topo0 := ensureR3(ctx, t, js0)
	info, err := topo0.Requests.Info(ctx)
	if err != nil || info.Cluster == nil || nodes[info.Cluster.Leader] == nil {
		t.Fatalf("requests stream leader: %+v %v", info, err)
	}
	leader := info.Cluster.Leader
	// The gateway's connection is to a node that survives.
	var other *natsnode.Embedded
	for name, e := range nodes {
		if name != leader {
			other = e
			break
		}
	}
	nc, err := other.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	const callTimeout = 15 * time.Second
	gw, err := toolworker.NewGateway(toolworker.GatewayConfig{Topology: topo, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}

	nodes[leader].Shutdown()
	t0 := time.Now()
	q := schema.Request{V: 1, RequestID: "r-election", Session: "s-el", Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A"}`)}
	_, err = gw.Call(ctx, q)
	d := time.Since(t0)
	if !errors.Is(err, schema.ErrResultPending) {
		t.Fatalf("call during the JW_REQUESTS election answered %v after %s, want result_pending after the call timeout (%s) with the request stored", err, d.Round(time.Millisecond), callTimeout)
	}
	n := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		si, err := topo.Requests.Info(actx)
		acancel()
		if err == nil {
			n = int(si.State.Msgs)
			break
		}
	}
	if n != 1 {
		t.Fatalf("JW_REQUESTS holds %d requests after the call, want 1", n)
	}
}
