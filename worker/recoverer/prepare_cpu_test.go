package recoverer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// BenchmarkPrepareCPU measures the process CPU (client and embedded
// server) of one prepare, alone and sequential, on each path — a plan
// issued (the full path: review, history, create, publish) and the same
// call asked again (review, KV get, the plan's latest message, the plan
// consumer's ack floor) — next to the same requests sent bare, one after
// the other, by the topology: what a prepare costs beyond its requests.
// cpu-µs/op and wall-µs/op are per prepare (or per bare set of
// requests), 300 of them per iteration.
func BenchmarkPrepareCPU(b *testing.B) {
	_, _, topo := streamtest.StartWith(b, streamtest.Config{})
	ctx := context.Background()
	rec, err := New(Config{Topology: topo, Name: "cpu", DisableService: true, PlannerKey: newPlanner(b)})
	if err != nil {
		b.Fatal(err)
	}
	const n = 300
	value := make([]byte, 700)
	cpuPer := func(b *testing.B, ops int, f func()) {
		b.Helper()
		c0, t0 := processCPU(), time.Now()
		f()
		b.ReportMetric(float64((processCPU()-c0).Microseconds())/float64(ops), "cpu-µs/op")
		b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(ops), "wall-µs/op")
	}
	round := 0
	b.Run("full", func(b *testing.B) {
		for range b.N {
			round++
			ss := fillUncertain(b, topo, fmt.Sprintf("full%d", round), n)
			cpuPer(b, n, func() {
				for _, s := range ss {
					if _, err := rec.Prepare(ctx, s, "c-1"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
	b.Run("full-bare", func(b *testing.B) {
		for range b.N {
			round++
			ss := fillUncertain(b, topo, fmt.Sprintf("bare%d", round), n)
			cpuPer(b, n, func() {
				for i, s := range ss {
					_ = topo.Reader().ReadSubject(ctx, topo.Names().StreamName("REVIEWS"), topo.Names().ReviewsSubject(s), func(*jetstream.RawStreamMsg) error { return nil })
					id := fmt.Sprintf("bare-%d-%d", round, i)
					_, _ = topo.PlanBucket.Get(ctx, id)
					if _, err := topo.Plans().LoadForPlan(ctx, s); err != nil {
						b.Fatal(err)
					}
					if _, err := topo.PlanBucket.Update(ctx, id, value, 0); err != nil {
						b.Fatal(err)
					}
					m := nats.NewMsg(topo.Names().PlansSubject(s))
					m.Data = value[:500]
					if _, err := topo.JS.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
	ss := fillUncertain(b, topo, "again", n)
	for _, s := range ss {
		if _, err := rec.Prepare(ctx, s, "c-1"); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("repeat", func(b *testing.B) {
		for range b.N {
			cpuPer(b, n, func() {
				for _, s := range ss {
					if _, err := rec.Prepare(ctx, s, "c-1"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
	b.Run("repeat-bare", func(b *testing.B) {
		for range b.N {
			cpuPer(b, n, func() {
				for _, s := range ss {
					_ = topo.Reader().ReadSubject(ctx, topo.Names().StreamName("REVIEWS"), topo.Names().ReviewsSubject(s), func(*jetstream.RawStreamMsg) error { return nil })
					id := recovery.PlanID(s, "c-1")
					if _, err := topo.PlanBucket.Get(ctx, id); err != nil {
						b.Fatal(err)
					}
					if _, err := topo.Plans().PlanMessage(ctx, s, id); err != nil {
						b.Fatal(err)
					}
					if _, _, err := topo.Plans().PlanConsumerAckFloor(ctx, s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
}
