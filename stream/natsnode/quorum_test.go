package natsnode_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestWatchQuorumMovesToAServerWithJetStream: a connection whose server
// answers every JetStream request "no responders" while the connection
// is up is moved, after After, to the other server of its pool, where
// JetStream answers; the reconnect is counted and reported, and the
// watch then leaves the connection alone.
func TestWatchQuorumMovesToAServerWithJetStream(t *testing.T) {
	bad := streamtest.StartPlain(t)
	good, _, _ := streamtest.Start(t)
	nc := streamtest.ConnectFirst(t, bad.ClientURL(), good.ClientURL())
	if _, err := nc.Request("$JS.API.INFO", nil, time.Second); err != nats.ErrNoResponders {
		t.Fatalf("JetStream on the plain server: %v, want no responders", err)
	}
	var reasons atomic.Value
	w := natsnode.WatchQuorum(context.Background(), nc, natsnode.QuorumWatchConfig{After: 300 * time.Millisecond, Every: 50 * time.Millisecond,
		OnReconnect: func(why string) { reasons.Store(why) }})
	t.Cleanup(w.Stop)
	streamtest.Eventually(t, 10*time.Second, "the connection moved to the server with JetStream", func() bool {
		return nc.IsConnected() && nc.ConnectedUrl() == good.ClientURL()
	})
	if _, err := nc.Request("$JS.API.INFO", nil, 2*time.Second); err != nil {
		t.Fatalf("JetStream after the move: %v", err)
	}
	if w.Reconnects() != 1 {
		t.Fatalf("forced reconnects %d, want 1", w.Reconnects())
	}
	if why, _ := reasons.Load().(string); !strings.Contains(why, "no responders") {
		t.Fatalf("reason %q, want it to name no responders", why)
	}
	// JetStream answers now: nothing more is forced.
	start := time.Now()
	streamtest.Eventually(t, 5*time.Second, "a second of probes", func() bool { return time.Since(start) > time.Second })
	if w.Reconnects() != 1 || nc.ConnectedUrl() != good.ClientURL() {
		t.Fatalf("after a second on the good server: %d forced, on %s", w.Reconnects(), nc.ConnectedUrl())
	}
}

// TestWatchQuorumLeavesAHealthyConnection: a connection whose server
// answers is never moved, and a pool of one server is never forced
// (there is nowhere to go), however long JetStream fails there.
func TestWatchQuorumLeavesAHealthyConnection(t *testing.T) {
	good, nc, _ := streamtest.Start(t)
	w := natsnode.WatchQuorum(context.Background(), nc, natsnode.QuorumWatchConfig{After: 200 * time.Millisecond, Every: 50 * time.Millisecond})
	bad := streamtest.StartPlain(t)
	only, err := nats.Connect(bad.ClientURL(), nats.MaxReconnects(-1), nats.IgnoreDiscoveredServers())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(only.Close)
	w2 := natsnode.WatchQuorum(context.Background(), only, natsnode.QuorumWatchConfig{After: 200 * time.Millisecond, Every: 50 * time.Millisecond})
	start := time.Now()
	streamtest.Eventually(t, 5*time.Second, "a second of probes", func() bool { return time.Since(start) > time.Second })
	w.Stop()
	w2.Stop()
	w2.Stop() // twice is fine
	if w.Reconnects() != 0 || nc.ConnectedUrl() != good.ClientURL() {
		t.Fatalf("healthy connection: %d forced reconnects, on %s", w.Reconnects(), nc.ConnectedUrl())
	}
	if w2.Reconnects() != 0 {
		t.Fatalf("a pool of one: %d forced reconnects, want none", w2.Reconnects())
	}
	if got := fmt.Sprint(only.Servers()); !strings.Contains(got, bad.Addr().String()) {
		t.Fatalf("pool %s", got)
	}
}
