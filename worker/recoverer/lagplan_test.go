package recoverer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// laggingKV is jw_plans read through a replica that has not applied the
// latest creates: its first misses Gets answer "not found" although the
// key exists (a create of it says so).
type laggingKV struct {
	jetstream.KeyValue
	misses atomic.Int32
}

func (k *laggingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.misses.Add(-1) >= 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return k.KeyValue.Get(ctx, key)
}

// TestRacingPrepareOnLaggingReplica is the chaos run's "concurrent prepares
// answer internal (plan not issued)": a prepare whose KV create lost to
// another recoverer's, and whose read of the winner's plan is served by a
// replica behind, returns the stored plan, not an error.
func TestRacingPrepareOnLaggingReplica(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	as := e.assessments()
	first := e.recoverer("a")
	e.run(first)
	started(t, first)
	w := e.writer("s-p", "w1")
	w.call("o-1", "orders.create", effect.Idempotent, "k-1")
	w.started("o-1")
	w.result("o-1", schema.StatusFailed, "")
	as.wait(t, "s-p", "o-1", 5*time.Second)
	want, err := first.Prepare(ctx, "s-p", "o-1")
	if err != nil {
		t.Fatal(err)
	}

	second := e.recoverer("b")
	lag := &laggingKV{KeyValue: e.topo.PlanBucket}
	lag.misses.Store(4)
	second.issuer.plans = stream.NewPlans(lag)
	e.run(second)
	started(t, second)
	got, err := second.Prepare(ctx, "s-p", "o-1")
	if err != nil {
		t.Fatalf("prepare on a lagging replica: %v, want the stored plan", err)
	}
	if !stream.SamePlan(got, want) {
		t.Fatalf("plan %+v, want the first prepare's %+v", got, want)
	}
	if n := e.planMsgs()[want.PlanID]; n != 1 {
		t.Fatalf("plan published %d times, want once", n)
	}
}
