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
//
// Runnable examples, which have no testing.TB, use New and Close:
//
//	func Example() {
//		srv, err := streamtest.New(streamtest.Config{})
//		if err != nil {
//			panic(err)
//		}
//		defer srv.Close()
//		topo := srv.Topology
//		…
//	}
//
// Eventually is the one "poll until a condition holds or a deadline
// passes" of the tests (no time.Sleep to wait for a condition).
package streamtest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Config tunes Start; the zero value is what Start uses.
type Config struct {
	// Topology is passed to EnsureTopology (zero value: the defaults).
	Topology stream.TopologyConfig
	// Sync defaults to stream.SyncInterval (tests that check durability set
	// stream.SyncAlways).
	Sync natsnode.SyncMode
	// Dir defaults to t.TempDir().
	Dir string
}

// Start starts an embedded server with the default topology; see StartWith.
func Start(t testing.TB) (*natsnode.Embedded, *nats.Conn, *stream.Topology) {
	t.Helper()
	return StartWith(t, Config{})
}

// StartWith starts an embedded server on 127.0.0.1 (random port) with a
// store in a fresh temporary directory, connects to it and ensures the
// topology. Everything is closed when the test ends. It fails the test on
// any error.
func StartWith(t testing.TB, cfg Config) (*natsnode.Embedded, *nats.Conn, *stream.Topology) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("streamtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s.Embedded, s.Conn, s.Topology
}

// Server is an embedded server started by New, with a connection and the
// topology ensured.
type Server struct {
	// Embedded is the server.
	Embedded *natsnode.Embedded
	// Conn is a connection to it.
	Conn *nats.Conn
	// Topology is the topology ensured on it.
	Topology *stream.Topology

	removeDir string // the temporary store New made, removed by Close
}

// New starts an embedded server as StartWith does, for callers without a
// testing.TB (runnable examples, benchmarks' mains): Dir defaults to a new
// temporary directory that Close removes. Close tears everything down.
func New(cfg Config) (*Server, error) {
	if cfg.Sync == "" {
		cfg.Sync = natsnode.SyncInterval
	}
	s := &Server{}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "jingwei-streamtest-")
		if err != nil {
			return nil, fmt.Errorf("temporary directory: %w", err)
		}
		cfg.Dir, s.removeDir = dir, dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if s.Embedded, err = natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Dir: cfg.Dir, Listen: "127.0.0.1:-1", Sync: cfg.Sync}); err != nil {
		s.Close()
		return nil, fmt.Errorf("start server: %w", err)
	}
	if s.Conn, err = s.Embedded.Connect(); err != nil {
		s.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	js, err := jetstream.New(s.Conn)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if s.Topology, err = stream.EnsureTopology(ctx, js, cfg.Topology); err != nil {
		s.Close()
		return nil, fmt.Errorf("topology: %w", err)
	}
	return s, nil
}

// Close closes the connection, shuts the server down and removes the
// temporary store New made. Safe to call on a partly started Server.
func (s *Server) Close() {
	if s.Conn != nil {
		s.Conn.Close()
	}
	if s.Embedded != nil {
		s.Embedded.Shutdown()
	}
	if s.removeDir != "" {
		_ = os.RemoveAll(s.removeDir)
	}
}

// PollInterval is how often Eventually checks its condition.
const PollInterval = 10 * time.Millisecond

// Eventually checks cond every PollInterval until it holds, and fails the
// test (naming what it waited for) if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}

// maxLoadScale caps LoadScaled's factor: a bound stretched further than
// this no longer says anything about the code under test.
const maxLoadScale = 3

// LoadScaled returns the latency bound d stretched by how oversubscribed
// the machine is: d × the 1-minute load average per CPU
// (/proc/loadavg over runtime.NumCPU), at least 1 and at most 3. A bound
// a test asserts ("answered within a second") is a claim about the code
// on a machine that has the CPU for it; on two cores running three times
// the work the same code takes longer, and the test would report the
// machine, not the code. Where the load is unknown (no /proc) the bound
// is d.
func LoadScaled(d time.Duration) time.Duration {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return d
	}
	var load float64
	if _, err := fmt.Sscan(string(b), &load); err != nil {
		return d
	}
	f := min(max(load/float64(runtime.NumCPU()), 1), maxLoadScale)
	return time.Duration(float64(d) * f)
}
