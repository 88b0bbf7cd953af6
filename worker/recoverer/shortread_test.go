package recoverer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// TestShortHistoryNeverClassified is a wrong assessment seen on a
// cluster: a retry that ended ok, whose history is read from a replica
// behind the consumer, looks open (no result yet) and would be assessed
// uncertain / needs_review. The classifier's history reads here come back
// without their last events (a lagging replica, answering without an
// error) several times: the call is assessed only from a history that
// reaches the event, as completed, and never from a short one.
func TestShortHistoryNeverClassified(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	r := e.recoverer("a")
	var short, reads atomic.Int32
	short.Store(4)
	r.classify.load = func(ctx context.Context, session string, atLeast uint64) ([]schema.Event, error) {
		reads.Add(1)
		h, err := e.topo.Logs().LoadThrough(ctx, session, atLeast)
		if err == nil && short.Add(-1) >= 0 && len(h) > 2 {
			return h[:len(h)-2], nil // the replica has not got the retry's start and result yet
		}
		return h, err
	}
	e.run(r)
	started(t, r)

	w := e.writer("s-lag", "w1")
	w.call("p-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("p-1")
	w.result("p-1", schema.StatusFailed, "")
	w.retry("p-2", "p-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("p-2")
	w.result("p-2", schema.StatusOK, "")

	a := as.wait(t, "s-lag", "p-2", 15*time.Second)
	if a.Outcome != schema.OutcomeCompleted || a.Attempts != 2 {
		t.Fatalf("p-2 assessed %+v from a short history; want completed after 2 attempts", a)
	}
	if n := reads.Load(); n < 5 {
		t.Fatalf("%d history reads, want the 4 short ones retried", n)
	}
	waitAcked(t, e, "a", 6)
	if n := as.count("s-lag", "p-2"); n != 1 {
		t.Fatalf("p-2 assessed %d times", n)
	}
}
