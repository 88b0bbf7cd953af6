package recoverer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestFullSessionRealBoundary: a session holding exactly 100,000 events
// (the history limit; its writers stopped at the fence reserve, the
// reserve is full of fences) can still be taken over, inspected and
// refused cleanly: the takeover confirms it without a fence (nobody can
// append to it any more), inspect works,
// and prepare refuses with history_too_large even after a trusted
// not_executed review, publishing no plan. A session at the writers'
// limit is taken over with a fence, and prepare refuses its retry the
// same way.
func TestFullSessionRealBoundary(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("100,000 events: slow with -short or -race; .ci/run runs it without -race")
	}
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	reserve := schema.MaxHistoryEvents / 1000

	fill := func(session string, total, fences int) {
		w := e.writer(session, "w1")
		w.call("c-1", "payments.charge", effect.NonIdempotent, "k-1")
		w.started("c-1")
		if err := w.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		note, _ := schema.EncodeEvent(schema.Event{V: 1, Session: session, Epoch: 1, At: time.Now().UTC(), Type: "note"})
		var futures []jetstream.PubAckFuture
		wait := func() {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatal(err)
				}
			}
			futures = futures[:0]
		}
		publish := func(b []byte) {
			f, err := e.topo.JS.PublishAsync(e.topo.Names().EventsSubject(session), b)
			if err != nil {
				t.Fatal(err)
			}
			if futures = append(futures, f); len(futures) == 1024 {
				wait()
			}
		}
		for range total - fences - 2 {
			publish(note)
		}
		for i := range fences {
			f, _ := schema.EncodeEvent(schema.Event{V: 1, Session: session, Epoch: uint64(2 + i), At: time.Now().UTC(), Type: schema.TypeFenced,
				Fence: &schema.Fence{Epoch: uint64(2 + i), Owner: fmt.Sprintf("tw-%d", i)}})
			publish(f)
		}
		wait()
	}
	fill("s-full", schema.MaxHistoryEvents, reserve)
	fill("s-writers-full", schema.MaxHistoryEvents-reserve, 0)

	for _, s := range []string{"s-full", "s-writers-full"} {
		if _, err := r.TakeOver(ctx, s); err != nil {
			t.Fatalf("%s: TakeOver: %v", s, err)
		}
		if _, err := e.topo.Logs().Load(ctx, s); err != nil {
			t.Fatalf("%s: Load after the takeover: %v", s, err)
		}
		a, err := r.Inspect(ctx, s, "c-1")
		if err != nil || a.Decision != schema.DecisionNeedsReview {
			t.Fatalf("%s: Inspect: %+v %v", s, a, err)
		}
		e.publishReview(s, review(t, e.reviewer, s, "c-1", schema.VerdictNotExecuted))
		streamtest.Eventually(t, 10*time.Second, "review on record", func() bool {
			checks, err := r.Reviews(ctx, s, "c-1")
			return err == nil && len(checks) == 1
		})
		if _, err := r.Prepare(ctx, s, "c-1"); !errors.Is(err, schema.ErrHistoryTooLarge) {
			t.Fatalf("%s: Prepare: %v, want history_too_large", s, err)
		}
		if _, err := stream.NewPlans(e.topo.PlanBucket).Get(ctx, recovery.PlanID(s, "c-1")); !errors.Is(err, stream.ErrPlanNotIssued) {
			t.Fatalf("%s: a plan was issued: %v", s, err)
		}
	}
	if h, _ := e.topo.Logs().Load(ctx, "s-full"); len(h) != schema.MaxHistoryEvents {
		t.Fatalf("s-full holds %d events after the takeover, want exactly %d", len(h), schema.MaxHistoryEvents)
	}
}
