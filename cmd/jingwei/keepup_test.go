package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/ports"
	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	// A port below the ephemeral range: one the kernel hands to a listen on
	// port 0 could be taken again before the process started here binds it.
	p, err := ports.Free(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p[0])
}

func healthz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStartedBeforeJetStream: a tool worker and a recovery worker started
// before any server listens wait (not ready on /healthz, the reason
// logged), and come up, ready, once the server with JetStream starts; a
// SIGTERM then ends them with status 0.
func TestStartedBeforeJetStream(t *testing.T) {
	natsAddr := freeAddr(t)
	url := "nats://" + natsAddr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type proc struct {
		name   string
		health string
		stderr *syncBuffer
		done   chan int
	}
	keyFile := filepath.Join(t.TempDir(), "planner.nk")
	if code, _, stderr := runCLI("keys", "new", "--out", keyFile); code != exitOK {
		t.Fatalf("keys new: %d %s", code, stderr)
	}
	var procs []*proc
	for _, name := range []string{"worker", "recover"} {
		p := &proc{name: name, health: freeAddr(t), stderr: &syncBuffer{}, done: make(chan int, 1)}
		args := []string{name, "--server", url, "--health", p.health, "--lease-ttl", "2s"}
		if name == "recover" {
			args = append(args, "--planner-key", keyFile)
		}
		go func() { p.done <- run(ctx, args, io.Discard, p.stderr) }()
		procs = append(procs, p)
	}
	for _, p := range procs {
		streamtest.Eventually(t, 10*time.Second, p.name+" waits, not ready", func() bool {
			code, body := healthz(p.health)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "not ready") &&
				strings.Contains(p.stderr.String(), "waiting for the server and JetStream")
		})
		select {
		case st := <-p.done:
			t.Fatalf("%s exited (%d) without a server:\n%s", p.name, st, p.stderr.String())
		default:
		}
	}

	srv, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: filepath.Join(t.TempDir(), "data"), Listen: natsAddr, Sync: natsnode.SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, p := range procs {
		streamtest.Eventually(t, 30*time.Second, p.name+" ready once JetStream is", func() bool {
			code, _ := healthz(p.health)
			return code == http.StatusOK
		})
	}
	cancel()
	for _, p := range procs {
		select {
		case st := <-p.done:
			if st != exitOK {
				t.Fatalf("%s: exit %d\n%s", p.name, st, p.stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop", p.name)
		}
	}
}

// TestWatchQuorumCountsForcedReconnects: a process's connection to a
// server where JetStream does not answer (no responders) is moved by
// watchQuorum to the other server of its pool, and the move is counted in
// jingwei_nats_forced_reconnects_total on the process's /metrics registry.
func TestWatchQuorumCountsForcedReconnects(t *testing.T) {
	old := quorumWatch
	quorumWatch = natsnode.QuorumWatchConfig{After: 200 * time.Millisecond, Every: 50 * time.Millisecond}
	t.Cleanup(func() { quorumWatch = old })
	bad := streamtest.StartPlain(t)
	good, _, _ := streamtest.Start(t)
	nc := streamtest.ConnectFirst(t, bad.ClientURL(), good.ClientURL())
	ms := &metricsServer{reg: metrics.NewRegistry()}
	count := func() float64 {
		var m dto.Metric
		if err := forcedReconnects.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := count()
	var logs syncBuffer
	stop := watchQuorum(context.Background(), nc, zerolog.New(&logs), ms)
	defer stop()
	streamtest.Eventually(t, 10*time.Second, "the move to the server with JetStream", func() bool {
		return nc.IsConnected() && nc.ConnectedUrl() == good.ClientURL()
	})
	if got := count() - before; got != 1 {
		t.Fatalf("counter grew by %v, want 1", got)
	}
	mfs, err := ms.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "jingwei_nats_forced_reconnects_total"
	}
	if !found {
		t.Fatal("jingwei_nats_forced_reconnects_total not in the registry")
	}
	if !strings.Contains(logs.String(), "reconnecting to another server") {
		t.Fatalf("no log of why; log:\n%s", logs.String())
	}
	// A second process attempt registers the same counter again: no error.
	stop2 := watchQuorum(context.Background(), nc, zerolog.Nop(), ms)
	stop2()
}
