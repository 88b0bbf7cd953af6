package stream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// setup starts an embedded server for an internal test or benchmark
// (streamtest cannot be imported from package stream itself).
func setup(t testing.TB, cfg TopologyConfig) *Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: SyncInterval})
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
