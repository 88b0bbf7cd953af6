package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// BenchmarkRuntimeCallTwo measures what `jingwei bench`'s row "runtime
// call, no-op tool, vs raw 2-append call" measures, in alternating batches
// of 100 on one embedded server: calls/s through the runtime with a no-op
// tool (the combined form: tool.call{started}, tool.result) against raw
// "calls"/s of two publishes with the expected-last-subject-sequence
// header of the same payloads (ratio; the target is ≥ 0.9), and
// against two Log.Append of the same events (ratio_log: what the runtime
// adds to the log's own appends).
func BenchmarkRuntimeCallTwo(b *testing.B) {
	for _, mode := range []natsnode.SyncMode{natsnode.SyncInterval, natsnode.SyncAlways} {
		b.Run("sync="+string(mode), func(b *testing.B) { benchRuntimeTwo(b, mode) })
	}
}

func benchRuntimeTwo(b *testing.B, mode natsnode.SyncMode) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Sync: mode})
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(contract.Effect, contract.Revision),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	id := "c-" + strings.Repeat("0", 32)
	evs := []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: args, Started: true,
			Operation: &schema.Operation{Task: worker.DefaultTask, Key: "op-" + strings.Repeat("0", 32), Contract: contract}}},
		{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}},
	}

	const sessionOps = 20_000 // calls per session: 40,000 events of the 100,000 a session holds
	var (
		rt       *worker.Runtime
		lg       *stream.Log
		rawSubj  string
		payloads [][]byte
		last     uint64
		gen      int
		inSess   int
	)
	next := func() {
		gen++
		inSess, last = 0, 0
		l, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("two-rt-%d", gen), "bench", 1)
		if err != nil {
			b.Fatal(err)
		}
		if rt, err = worker.New(worker.Config{Session: l.Session(), Log: l, Registry: reg, Plans: plans, Budget: budget}); err != nil {
			b.Fatal(err)
		}
		if lg, err = topo.Logs().OpenLog(ctx, fmt.Sprintf("two-log-%d", gen), "bench", 1); err != nil {
			b.Fatal(err)
		}
		raw := fmt.Sprintf("two-raw-%d", gen)
		rawSubj, payloads = topo.Names().EventsSubject(raw), nil
		for _, ev := range evs {
			ev.V, ev.Session, ev.Epoch, ev.At = schema.Version, raw, 1, time.Now().UTC()
			p, err := schema.EncodeEvent(ev)
			if err != nil {
				b.Fatal(err)
			}
			payloads = append(payloads, p)
		}
	}
	next()

	const batch = 100
	var rtDur, rawDur, logDur time.Duration
	var ratios, logRatios []float64 // per batch: adjacent batches drift alike
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		if inSess+n > sessionOps {
			b.StopTimer()
			next()
			b.StartTimer()
		}
		t0 := time.Now()
		for range n {
			for _, p := range payloads {
				msg := nats.NewMsg(rawSubj)
				msg.Data = p
				ack, err := topo.JS.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
				if err != nil {
					b.Fatal(err)
				}
				last = ack.Sequence
			}
		}
		t1 := time.Now()
		for range n {
			res, err := rt.Call(ctx, "noop", args)
			if err != nil || res.Status != schema.StatusOK {
				b.Fatal(res.Status, err)
			}
		}
		t2 := time.Now()
		for range n {
			for _, ev := range evs {
				if _, err := lg.Append(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		}
		t3 := time.Now()
		ratios = append(ratios, t1.Sub(t0).Seconds()/t2.Sub(t1).Seconds())
		logRatios = append(logRatios, t3.Sub(t2).Seconds()/t2.Sub(t1).Seconds())
		rawDur += t1.Sub(t0)
		rtDur += t2.Sub(t1)
		logDur += t3.Sub(t2)
		done += n
		inSess += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/rtDur.Seconds(), "calls/s")
	b.ReportMetric(float64(b.N)/rawDur.Seconds(), "raw_calls/s")
	b.ReportMetric(rawDur.Seconds()/rtDur.Seconds(), "ratio")
	b.ReportMetric(logDur.Seconds()/rtDur.Seconds(), "ratio_log")
	b.ReportMetric(median(ratios), "ratio_p50")
	b.ReportMetric(median(logRatios), "ratio_log_p50")
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
