package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// TestPartitionThroughProxies runs three nodes in this process, wired as a
// chaos run wires them (every route through a proxy, a black hole
// advertised), checks that an R3 stream works with authorization on, then
// cuts one node's proxies: a message published on the cut node no longer
// reaches a subscriber on another node, and does again once healed. So no
// route goes around the proxies.
func TestPartitionThroughProxies(t *testing.T) {
	c := startCluster(t)
	ctx, net := c.ctx, c.net
	js := c.probeStream(t)
	if _, err := js.Publish(ctx, "probe.js", []byte("x")); err != nil {
		t.Fatal(err)
	}

	pub, sub := c.connect(t, net.clientURL(0)), c.connect(t, net.clientURL(1))
	got := make(chan struct{}, 64)
	s, err := sub.Subscribe("probe.core", func(*nats.Msg) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	_ = sub.Flush()
	// arrives polls until a message published on node 0 reaches node 1.
	arrives := func(within time.Duration) bool {
		end := time.Now().Add(within)
		for time.Now().Before(end) {
			_ = pub.Publish("probe.core", nil)
			_ = pub.Flush()
			select {
			case <-got:
				return true
			case <-time.After(100 * time.Millisecond):
			}
		}
		return false
	}
	if !arrives(20 * time.Second) {
		t.Fatal("no route between node 0 and node 1")
	}
	net.Partition(0)
	time.Sleep(300 * time.Millisecond)
	for len(got) > 0 {
		<-got
	}
	if arrives(3 * time.Second) {
		t.Fatal("a message crossed the partition: a route goes around the proxies")
	}
	net.Heal()
	if !arrives(20 * time.Second) {
		t.Fatal("no route after the partition healed")
	}
}

// testCluster is three nodes run in this process, wired as a chaos run
// wires them (every route through a proxy, a black hole advertised), with
// authorization on (role keys in keys).
type testCluster struct {
	ctx  context.Context // canceled, and the nodes waited for, when the test ends
	net  *network
	keys access.KeyDir
}

// startCluster starts a testCluster; the nodes are stopped and the
// network closed when the test ends. With -short it skips the test.
func startCluster(t *testing.T) *testCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	dir := t.TempDir()
	keys := access.KeyDir(filepath.Join(dir, "auth"))
	if _, err := keys.Init(); err != nil {
		t.Fatal(err)
	}
	net, err := newNetwork(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range 3 {
		cfg := net.nodeConfig(i, filepath.Join(dir, fmt.Sprintf("n%d", i)), string(keys))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := RunNode(ctx, cfg, nil); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		}()
	}
	return &testCluster{ctx: ctx, net: net, keys: keys}
}

// connect connects as the admin role to url (one URL or a pool); the
// connection is closed when the test ends.
func (c *testCluster) connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := natsnode.Connect(c.ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: c.keys.SeedFile(access.RoleAdmin), ConnectTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// probeStream connects to every node's URL and creates the R3 stream
// PROBE (subject probe.js), polling for up to 60 s while a meta leader is
// elected; it returns that connection's JetStream.
func (c *testCluster) probeStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, _ := jetstream.New(c.connect(t, c.net.URLs()))
	for deadline := time.Now().Add(60 * time.Second); ; {
		sctx, scancel := context.WithTimeout(c.ctx, 3*time.Second)
		_, err := js.CreateOrUpdateStream(sctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.js"}, Replicas: 3})
		scancel()
		if err == nil {
			return js
		}
		if time.Now().After(deadline) {
			t.Fatalf("R3 stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // a meta leader being elected; polled
	}
}
