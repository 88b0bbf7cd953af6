package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// setup starts an embedded server for an internal test or benchmark
// (streamtest cannot be imported from package stream itself).
func setup(t testing.TB, cfg TopologyConfig) *Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := EnsureTopology(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// startedLog fences session as owner w1 at epoch 1 (event 1) and appends n
// tool.started events after it, for calls c-0 to c-<n-1>.
func startedLog(t testing.TB, topo *Topology, session string, n int) *Log {
	t.Helper()
	ctx := context.Background()
	lg, err := topo.Logs().Fence(ctx, session, "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for j := range n {
		if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", j)}}); err != nil {
			t.Fatal(err)
		}
	}
	return lg
}
