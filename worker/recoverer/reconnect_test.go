package recoverer

import (
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestSurvivesServerRestart: the server goes away and comes back (same
// store, same address); the recoverer keeps classifying.
func TestSurvivesServerRestart(t *testing.T) {
	srv, nc, topo := streamtest.StartRestartable(t, stream.TopologyConfig{LeaseTTL: time.Second, LeaseMarkerTTL: time.Second})
	e := &env{t: t, nc: nc, topo: topo}
	r := e.recoverer("a", func(c *Config) { c.DisableService = true })
	e.run(r)

	w := e.writer("s-1", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.result("c-1", schema.StatusOK, "")
	streamtest.Eventually(t, 5*time.Second, "first call classified", func() bool { return r.Stats().EventsSeen >= 2 })

	srv.Restart()

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
