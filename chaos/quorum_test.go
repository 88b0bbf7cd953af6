package chaos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// TestQuorumWatchLeavesACutOffNode runs three nodes in this process wired
// as a chaos run wires them, connects a client (the tool worker's role,
// every node's URL in its pool, as `jingwei worker --server` gets them) to
// node 0 and cuts node 0 off from the others: the connection stays up and
// JetStream fails through it (the client never moves by itself); with
// stream.WatchQuorum on it, the client moves to a node of the majority and
// its JetStream publishes succeed again, through the same connection.
func TestQuorumWatchLeavesACutOffNode(t *testing.T) {
	cl := startCluster(t)
	ctx, net, keys := cl.ctx, cl.net, cl.keys
	cl.probeStream(t)

	// The client, on node 0 (the pool is shuffled: connect until it is).
	var nc *nats.Conn
	for range 50 {
		c, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: net.URLs(), NKeySeedFile: keys.SeedFile(access.RoleAdmin), Name: "cut-off client", ConnectTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if c.ConnectedUrl() == net.clientURL(0) {
			nc = c
			break
		}
		c.Close()
	}
	if nc == nil {
		t.Fatal("never connected to node 0 first")
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	publish := func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, err := js.Publish(pctx, "probe.js", []byte("x"))
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); publish() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("no JetStream publish through node 0 before the cut")
		}
	}

	net.Partition(0)
	defer net.Heal()
	// Without the watch: still connected to node 0, and JetStream fails.
	var lastErr error
	for deadline := time.Now().Add(20 * time.Second); ; {
		if lastErr = publish(); lastErr != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("JetStream publishes still succeed through node 0, cut off for 20 s")
		}
	}
	if !nc.IsConnected() || nc.ConnectedUrl() != net.clientURL(0) {
		t.Fatalf("the client moved by itself (connected %v to %s): the test shows nothing", nc.IsConnected(), nc.ConnectedUrl())
	}
	t.Logf("cut off: %v", lastErr)

	var moved sync.Once
	movedAt := make(chan string, 1)
	w := natsnode.WatchQuorum(ctx, nc, natsnode.QuorumWatchConfig{After: 3 * time.Second, Every: 250 * time.Millisecond,
		OnReconnect: func(why string) { moved.Do(func() { movedAt <- why }) }})
	defer w.Stop()
	start := time.Now()
	// The meta leader may have been node 0: it answers until it steps
	// down for a lost quorum (up to 20 s), then the watch's 3 s.
	for deadline := time.Now().Add(60 * time.Second); ; {
		err := publish()
		if err == nil && nc.ConnectedUrl() != net.clientURL(0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s of the watch: connected to %s (%d forced reconnects), publish: %v", nc.ConnectedUrl(), w.Reconnects(), err)
		}
	}
	select {
	case why := <-movedAt:
		t.Logf("moved to %s after %s: %s", nc.ConnectedUrl(), time.Since(start).Round(100*time.Millisecond), why)
	default:
		t.Fatal("the client moved without a forced reconnect")
	}
	if w.Reconnects() < 1 {
		t.Fatalf("forced reconnects %d", w.Reconnects())
	}
}
