// Package streamtest starts an embedded jingwei NATS server for tests: a
// random loopback port, a t.TempDir() store, the fast interval sync mode and
// the topology ensured, all torn down by t.Cleanup.
//
//	func TestSomething(t *testing.T) {
//		srv, nc, topo := streamtest.Start(t)
//		lease, _ := topo.AcquireLease(ctx, "s-1", "me")
//		log, _ := topo.Fence(ctx, "s-1", "me", lease.Epoch)
//		…
//	}
//
// Tests that check durability pass Config{Sync: stream.SyncAlways}; tests
// that need small history limits or short leases pass a TopologyConfig.
package streamtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// Config tunes Start; the zero value is what Start uses.
type Config struct {
	// Topology is passed to EnsureTopology (zero value: the defaults).
	Topology stream.TopologyConfig
	// Sync defaults to stream.SyncInterval (tests that check durability set
	// stream.SyncAlways).
	Sync stream.SyncMode
	// Dir defaults to t.TempDir().
	Dir string
}

// Start starts an embedded server with the default topology; see StartWith.
func Start(t testing.TB) (*stream.Embedded, *nats.Conn, *stream.Topology) {
	t.Helper()
	return StartWith(t, Config{})
}

// StartWith starts an embedded server on 127.0.0.1 (random port) with a
// store in a fresh temporary directory, connects to it and ensures the
// topology. Everything is closed when the test ends. It fails the test on
// any error.
func StartWith(t testing.TB, cfg Config) (*stream.Embedded, *nats.Conn, *stream.Topology) {
	t.Helper()
	if cfg.Sync == "" {
		cfg.Sync = stream.SyncInterval
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: cfg.Dir, Listen: "127.0.0.1:-1", Sync: cfg.Sync})
	if err != nil {
		t.Fatalf("streamtest: start server: %v", err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatalf("streamtest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("streamtest: jetstream: %v", err)
	}
	topo, err := stream.EnsureTopology(ctx, js, cfg.Topology)
	if err != nil {
		t.Fatalf("streamtest: topology: %v", err)
	}
	return e, nc, topo
}
