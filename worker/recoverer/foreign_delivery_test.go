package recoverer

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestClassifierIgnoresAnotherConsumersDeliveries: a push consumer's
// deliver subject is checked against no permission, so a client of the
// trusted account can have any consumer deliver on the classifier's pull
// inbox — here, a second copy of a session's events. The classifier
// classifies only its own consumer's deliveries (by the stream and
// consumer its ack subject names): the copies are neither observed nor
// assessed, and the next real event is classified as usual. Before, they
// were taken for its own deliveries: out of its sequence, each ended the
// run as if deliveries had been lost (a restart from the ack floor), and
// one arriving as a run's first delivery would have been classified as an
// event of the log.
func TestClassifierIgnoresAnotherConsumersDeliveries(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()

	var logs logLines
	r := e.recoverer("a", func(c *Config) { c.Logger = zerolog.New(&logs) })
	// The inbox the classifier pulls on, learnt from its pull requests.
	inbox := streamtest.WatchPullInbox(t, e.nc, e.topo.Names().StreamName("EVENTS"), r.consumerName("events"))
	e.run(r)
	started(t, r)

	w := e.writer("s-x", "w-x")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusOK, "")
	as.wait(t, "s-x", "c-1", 5*time.Second)
	streamtest.Eventually(t, 5*time.Second, "the three events seen", func() bool { return r.Stats().EventsSeen >= 3 })
	seen := r.Stats().EventsSeen

	deliverTo := inbox()
	t.Logf("the classifier pulls on %s", deliverTo)
	streamtest.Intrude(t, e.topo.Events, e.topo.Names().EventsSubject("s-x"), deliverTo, 3)

	// The next real event is classified; the copies changed nothing.
	w.call("c-2", "orders.create", effect.Idempotent, "k-2")
	w.started("c-2")
	w.result("c-2", schema.StatusOK, "")
	a := as.wait(t, "s-x", "c-2", 10*time.Second)
	if a.Outcome != schema.OutcomeCompleted {
		t.Fatalf("c-2 assessed %+v, want completed", a)
	}
	streamtest.Eventually(t, 5*time.Second, "c-2's events seen", func() bool { return r.Stats().EventsSeen >= seen+3 })
	if got := r.Stats().EventsSeen; got != seen+3 {
		t.Fatalf("the classifier saw %d events after the copies, want %d (the 3 of c-2 only)", got-seen, 3)
	}
	if n := as.count("s-x", "c-1"); n != 1 {
		t.Fatalf("c-1 assessed %d times, want once", n)
	}
	// Taken for its own deliveries, the copies made the classifier give
	// its run up as if deliveries had been lost, and start again.
	if logs.has("skipped deliveries") {
		t.Fatal("the copies were taken for the classifier's own deliveries (it started again from its ack floor)")
	}
	if !logs.has("another consumer delivered") {
		t.Fatal("the copies were not reported as another consumer's")
	}
}

// logLines collects a zerolog's lines.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}
