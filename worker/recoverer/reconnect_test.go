package recoverer

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestSurvivesServerRestart: the server goes away and comes back (same
// store, same address); the recoverer keeps classifying.
func TestSurvivesServerRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: dir, Listen: "127.0.0.1:-1", Sync: stream.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.ClientURL())
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{LeaseTTL: time.Second, LeaseMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, topo: topo}
	r := e.recoverer("a", func(c *Config) { c.DisableService = true })
	e.run(r)

	w := e.writer("s-1", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.result("c-1", schema.StatusOK, "")
	streamtest.Eventually(t, 5*time.Second, "first call classified", func() bool { return r.Stats().EventsSeen >= 2 })

	srv.Shutdown()
	srv2, err := stream.StartEmbedded(ctx, stream.EmbeddedConfig{Dir: dir, Listen: u.Host, Sync: stream.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	streamtest.Eventually(t, 10*time.Second, "client reconnected", nc.IsConnected)

	as := e.assessments()
	w2 := e.writer("s-2", "w1")
	w2.call("c-2", "payments.charge", effect.NonIdempotent, "k-2")
	w2.started("c-2")
	w2.result("c-2", schema.StatusFailed, "")
	a := as.wait(t, "s-2", "c-2", 20*time.Second)
	if a.Decision != schema.DecisionNeedsReview {
		t.Fatalf("assessment after the restart %+v", a)
	}
	// Leases are still watched: a writer that dies now is taken over.
	w3 := e.writer("s-3", "w1")
	w3.call("c-3", "orders.create", effect.Idempotent, "k-3")
	if a := as.wait(t, "s-3", "c-3", 10*time.Second); a.Evidence != "not_started_marker" {
		t.Fatalf("takeover assessment after the restart %+v", a)
	}
}
