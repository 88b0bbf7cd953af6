package streamtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// StartPlain starts a nats-server without JetStream on a random loopback
// port, shut down by t.Cleanup: every $JS.API request on it is answered
// "no responders", as on a server cut off from its cluster's JetStream.
func StartPlain(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("plain nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// ConnectFirst connects to a pool of the two URLs, first and then, that
// reconnects forever every 50 ms, and returns it once it is connected to
// first (nats.go shuffles the pool, so it connects again until it is);
// the connection is closed by t.Cleanup.
func ConnectFirst(t testing.TB, first, then string) *nats.Conn {
	t.Helper()
	for range 50 {
		c, err := nats.Connect(first+","+then, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if c.ConnectedUrl() == first {
			t.Cleanup(c.Close)
			return c
		}
		c.Close()
	}
	t.Fatalf("never connected to %s first", first)
	return nil
}
