package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestPlansIssueRace: racing Issues of one plan (each stamped with its own
// IssuedAt, as racing recoverers stamp theirs) store it once: exactly one
// has Created, and every one returns the record that one stored.
func TestPlansIssueRace(t *testing.T) {
	ctx := context.Background()
	plans := stream.NewPlans(kvForPlanTest(t, "jw_plans"))
	const racers = 8
	recs := make([]stream.PlanRecord, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := testPlan("p-race")
			p.IssuedAt = p.IssuedAt.Add(time.Duration(i) * time.Second)
			recs[i], errs[i] = plans.Issue(ctx, p)
		}()
	}
	wg.Wait()
	created := -1
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("issue %d: %v", i, errs[i])
		}
		if recs[i].Created {
			if created >= 0 {
				t.Fatalf("issues %d and %d both created the plan", created, i)
			}
			created = i
		}
	}
	if created < 0 {
		t.Fatal("no issue created the plan")
	}
	won := recs[created]
	for i, rec := range recs {
		if rec.Revision != won.Revision || !rec.Plan.IssuedAt.Equal(won.Plan.IssuedAt) || rec.State != stream.PlanIssued {
			t.Fatalf("issue %d returned %+v, want the stored record %+v", i, rec, won)
		}
	}
}

// TestPlansIssueOverMarker: a plan id whose key holds a delete or purge
// marker is issued (the create expecting revision 0 loses to the marker,
// the get finds no record, and KeyValue.Create writes over it); issuing
// again afterwards returns that record.
func TestPlansIssueOverMarker(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_plans")
	plans := stream.NewPlans(kv)
	for _, tc := range []struct {
		id   string
		mark func(key string) error
	}{
		{"p-deleted", func(key string) error { return kv.Delete(ctx, key) }},
		{"p-purged", func(key string) error { return kv.Purge(ctx, key) }},
	} {
		if _, err := kv.Put(ctx, tc.id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := tc.mark(tc.id); err != nil {
			t.Fatal(err)
		}
		rec, err := plans.Issue(ctx, testPlan(tc.id))
		if err != nil || !rec.Created || rec.State != stream.PlanIssued {
			t.Fatalf("issue over a marker (%s): %+v %v, want created", tc.id, rec, err)
		}
		again, err := plans.Issue(ctx, testPlan(tc.id))
		if err != nil || again.Created || again.Revision != rec.Revision {
			t.Fatalf("issue again (%s): %+v %v, want the stored record", tc.id, again, err)
		}
		other := testPlan(tc.id)
		other.Key = "op-other"
		if _, err := plans.Issue(ctx, other); !errors.Is(err, stream.ErrPlanConflict) {
			t.Fatalf("conflicting issue (%s): %v, want ErrPlanConflict", tc.id, err)
		}
	}
}

// TestPlanConsumerAckFloor: the ack floor of a session's plan consumer
// reads "none" before a tool worker created it, then the stream sequence
// up to which it acknowledged, as the consumer's own info says — and a
// topology whose JW_PLANS is gone is an error, not "none".
func TestPlanConsumerAckFloor(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	if floor, ok, err := topo.Plans().PlanConsumerAckFloor(ctx, "s-1"); err != nil || ok || floor != 0 {
		t.Fatalf("before the consumer: %d %v %v, want 0 false nil", floor, ok, err)
	}
	p := topo.Names().PartitionOf("s-1")
	cons, err := topo.PlanLog.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: topo.Names().PlanConsumerName(p), FilterSubject: topo.Names().PlansPartitionSubject(p), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for range 2 {
		ack, err := topo.JS.Publish(ctx, topo.Names().PlansSubject("s-1"), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	if floor, ok, err := topo.Plans().PlanConsumerAckFloor(ctx, "s-1"); err != nil || !ok || floor != 0 {
		t.Fatalf("nothing acknowledged: %d %v %v, want 0 true nil", floor, ok, err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	floor, ok, err := topo.Plans().PlanConsumerAckFloor(ctx, "s-1")
	info, ierr := cons.Info(ctx)
	if ierr != nil {
		t.Fatal(ierr)
	}
	if err != nil || !ok || floor != seqs[0] || floor != info.AckFloor.Stream {
		t.Fatalf("one acknowledged: %d %v %v, want %d (consumer info %d)", floor, ok, err, seqs[0], info.AckFloor.Stream)
	}
	if err := topo.JS.DeleteStream(ctx, topo.PlanLog.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := topo.Plans().PlanConsumerAckFloor(ctx, "s-1"); err == nil || ok {
		t.Fatalf("JW_PLANS deleted: %v %v, want an error", ok, err)
	}
}
