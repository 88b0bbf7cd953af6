package streamtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Restartable is an embedded server a test stops and starts again on the
// same store and address, under clients that stay connected (they
// reconnect), as an operator's restart of the server would be.
type Restartable struct {
	t    testing.TB
	dir  string
	addr string
	nc   *nats.Conn
	srv  *natsnode.Embedded
}

// StartRestartable starts a Restartable server (interval sync, a
// t.TempDir() store, a random loopback port), connects to it and ensures
// the topology with tc. Everything is torn down by t.Cleanup.
func StartRestartable(t testing.TB, tc stream.TopologyConfig) (*Restartable, *nats.Conn, *stream.Topology) {
	t.Helper()
	r := &Restartable{t: t, dir: t.TempDir()}
	srv, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: r.dir, Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	t.Cleanup(func() { r.srv.Shutdown() })
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	r.addr = u.Host
	if r.nc, err = srv.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := stream.EnsureTopology(context.Background(), js, tc)
	if err != nil {
		t.Fatal(err)
	}
	return r, r.nc, topo
}

// Embedded is the server running now.
func (r *Restartable) Embedded() *natsnode.Embedded { return r.srv }

// Restart shuts the server down, starts it again on the same store and
// address, and waits (up to 20 s) for the connection StartRestartable
// made to reconnect.
func (r *Restartable) Restart() {
	r.t.Helper()
	r.srv.Shutdown()
	srv, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: r.dir, Listen: r.addr, Sync: natsnode.SyncInterval})
	if err != nil {
		r.t.Fatal(err)
	}
	r.srv = srv
	Eventually(r.t, 20*time.Second, "client reconnected", r.nc.IsConnected)
}
