package stream

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cpuNow is the process's user+system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPlanRequestCost measures, on one embedded server and one
// connection, the wall time and the process CPU (client and server, both
// in this process) of each kind of request plan issuance sends, one at a
// time: what a request of each kind costs, for the plan-issuance section
// of BENCHMARKS.md.
func BenchmarkPlanRequestCost(b *testing.B) {
	ctx := context.Background()
	t := setup(b, TopologyConfig{})
	startedLog(b, t, "s-1", 2)
	value := make([]byte, 700)
	if _, err := t.PlanBucket.Put(ctx, "p-1", value); err != nil {
		b.Fatal(err)
	}
	if _, err := t.JS.Publish(ctx, t.Names().PlansSubject("s-1"), value[:500], jetstream.WithMsgID("p-1")); err != nil {
		b.Fatal(err)
	}
	n := 0
	kinds := []struct {
		name string
		f    func() error
	}{
		{"kv get (direct get)", func() error { _, err := t.PlanBucket.Get(ctx, "p-1"); return err }},
		{"kv create (publish, expected revision 0)", func() error {
			n++
			_, err := t.PlanBucket.Update(ctx, fmt.Sprintf("p-new-%d", n), value, 0)
			return err
		}},
		{"kv create lost (publish refused)", func() error {
			_, err := t.PlanBucket.Update(ctx, "p-1", value, 0)
			if err == nil {
				return fmt.Errorf("create of an existing key succeeded")
			}
			return nil
		}},
		{"publish with Msg-Id, duplicate", func() error {
			_, err := t.JS.Publish(ctx, t.Names().PlansSubject("s-1"), value[:500], jetstream.WithMsgID("p-1"))
			return err
		}},
		{"leader message get, last by subject (API)", func() error { _, _, err := t.Logs().lastMsg(ctx, "s-1"); return err }},
		{"direct get, last by subject", func() error {
			_, err := t.PlanLog.GetLastMsgForSubject(ctx, t.Names().PlansStoredSubject("s-1"))
			return err
		}},
		{"consumer info, no such consumer (API)", func() error {
			_, _, err := t.Plans().PlanConsumerAckFloor(ctx, "s-1")
			return err
		}},
		{"batched direct get, GetBatch (3 events)", func() error {
			_, _, err := t.Reader().directBatch(ctx, t.Events.CachedInfo().Config.Name, t.Names().EventsSubject("s-1"), 1, 3, func(*jetstream.RawStreamMsg) error { return nil })
			return err
		}},
		{"batched direct get, shared subscription (3 events)", func() error {
			m, err := batchMuxOf(t.JS.Conn())
			if err != nil {
				return err
			}
			_, err = m.get(ctx, t.Reader().apiPrefix()+"DIRECT.GET."+t.Events.CachedInfo().Config.Name, batchRequest{Seq: 1, NextFor: t.Names().EventsSubject("s-1"), Batch: readBatch, MaxBytes: readBatchBytes}, time.Second)
			return err
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			cpu := cpuNow()
			start := time.Now()
			for range b.N {
				if err := k.f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "wall-µs/req")
			b.ReportMetric(float64((cpuNow()-cpu).Microseconds())/float64(b.N), "cpu-µs/req")
		})
	}
}
