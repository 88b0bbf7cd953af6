package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// benchRun numbers consumers across benchmark runs (the framework calls a
// benchmark more than once on the same server).
var benchRun atomic.Int64

// classifyFixture is a server whose JW_EVENTS holds events classifyEvents
// of finished calls (tool.call, tool.started, tool.result over 64
// sessions).
type classifyFixture struct {
	topo *stream.Topology
	last uint64 // the last event's stream sequence
}

const classifyEvents = 60_000

func newClassifyFixture(b *testing.B) *classifyFixture {
	_, _, topo := streamtest.StartWith(b, streamtest.Config{Topology: stream.TopologyConfig{Duplicates: time.Second}})
	for i := range classifyEvents / 3 {
		s := fmt.Sprintf("s-%d", i%64)
		id := fmt.Sprintf("c-%d", i)
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":2,"customer":"cust-9"}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: "op-" + id, Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK, Output: json.RawMessage(`{"order_id":"o-1"}`)}},
		} {
			ev.V, ev.Session, ev.Epoch, ev.At = 1, s, 1, time.Now().UTC()
			data, _ := json.Marshal(ev)
			if _, err := topo.JS.PublishAsync(topo.Names().EventsSubject(s), data); err != nil {
				b.Fatal(err)
			}
			if topo.JS.PublishAsyncPending() > 2000 {
				<-topo.JS.PublishAsyncComplete()
			}
		}
	}
	<-topo.JS.PublishAsyncComplete()
	info, err := topo.Events.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return &classifyFixture{topo: topo, last: info.State.LastSeq}
}

// acked waits until the durable consumer name has acknowledged every
// event, and returns how long that took from its creation. A consumer
// loop that ends first (done receives its error) fails the benchmark.
func (f *classifyFixture) acked(b *testing.B, name string, done <-chan error) time.Duration {
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			b.Fatalf("consumer %s did not acknowledge every event within 2 minutes", name)
		}
		select {
		case err := <-done:
			b.Fatalf("consumer %s ended before it acknowledged every event: %v", name, err)
		default:
		}
		c, err := f.topo.JS.Consumer(ctx, f.topo.Names().StreamName("EVENTS"), name)
		if err == nil && c.CachedInfo().AckFloor.Stream >= f.last {
			return time.Since(c.CachedInfo().Created)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// classify runs a fresh recoverer's classifier until it has acknowledged
// every event and returns how long that took.
func (f *classifyFixture) classify(b *testing.B) time.Duration {
	r, err := New(Config{Topology: f.topo, Name: fmt.Sprintf("bench-%d", benchRun.Add(1)), DisableService: true, PlannerKey: newPlanner(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.classify.run(ctx) }()
	d := f.acked(b, r.consumerName("events"), done)
	cancel()
	<-done
	return d
}

// processCPU returns the process's CPU time so far (the process runs the
// server too: a difference is everything a side costs the machine).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClassifyAlone runs only the recoverer's classification of the
// fixture, once per iteration: the benchmark to profile (-cpuprofile,
// -memprofile). It reports events/s and the process's CPU per event
// (server included) of the best iteration.
func BenchmarkClassifyAlone(b *testing.B) {
	f := newClassifyFixture(b)
	b.ResetTimer()
	var wall, cpu time.Duration
	for i := 0; i < b.N; i++ {
		c := processCPU()
		d := f.classify(b)
		if c = processCPU() - c; i == 0 || d < wall {
			wall, cpu = d, c
		}
	}
	b.ReportMetric(classifyEvents/wall.Seconds(), "classified_events/s")
	b.ReportMetric(float64(cpu.Microseconds())/classifyEvents, "cpu_us/event")
}

// BenchmarkClassify compares the recoverer's classification of the
// fixture with two raw durable consumers on the same stream, measured in
// the same run: one that stores as many assessment-sized messages and one
// that only acknowledges. It reports the ratios of their rates and the
// process's CPU per event of each side (server included).
func BenchmarkClassify(b *testing.B) {
	const events = classifyEvents
	f := newClassifyFixture(b)
	topo, ctx := f.topo, context.Background()
	acked := func(name string) time.Duration { return f.acked(b, name, nil) }

	// The raw sides have the recoverer's consumer settings (AckAll, the
	// same MaxAckPending and pull size, an ack every ackBatch events or
	// when nothing is pending): they differ only in what they do with the
	// events. All are timed until the ack floor reaches the last event
	// (the recoverer acks a batch once its assessments are stored).
	// raw consumes and acknowledges; with writes (the "storing" raw
	// consumer of jingwei bench) it also stores one assessment-sized
	// message (pre-encoded, with the same header) per finished call, async
	// with at most 2*ackBatch acks outstanding, and acknowledges a batch
	// once its messages are stored, the batch before settled while the
	// current one is in flight: the same JetStream work as the recoverer
	// with no classification, pipelined as far as it goes.
	assessment, _ := schema.EncodeAssessment(&schema.Assessment{Session: "s-63", CallID: "c-19999", Tool: "orders.create", Task: "t-1", Key: "op-c-19999",
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Outcome: schema.OutcomeCompleted, Evidence: "ok", Decision: schema.DecisionRefuse, Attempts: 1, Chain: []string{"c-19999"}})
	ajs, err := jetstream.New(topo.JS.Conn(), jetstream.WithPublishAsyncMaxPending(2*ackBatch))
	if err != nil {
		b.Fatal(err)
	}
	raw := func(writes bool) time.Duration {
		name := fmt.Sprintf("raw-%d", benchRun.Add(1))
		cons, err := topo.JS.CreateOrUpdateConsumer(ctx, topo.Names().StreamName("EVENTS"), eventsConsumerConfig(name))
		if err != nil {
			b.Fatal(err)
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
		if err != nil {
			b.Fatal(err)
		}
		defer it.Stop()
		type batch struct {
			last jetstream.Msg
			pubs []jetstream.PubAckFuture
		}
		var cur, prev batch
		settle := func(bt *batch) {
			for _, f := range bt.pubs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			if bt.last != nil {
				_ = bt.last.Ack()
			}
			*bt = batch{pubs: bt.pubs[:0]}
		}
		for n := 1; n <= events; n++ {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			md, err := m.Metadata()
			if err != nil {
				b.Fatal(err)
			}
			if writes && n%3 == 0 {
				msg := nats.NewMsg(topo.Names().AssessmentsSubject("s-63"))
				msg.Data = assessment
				msg.Header.Set(HeaderAssessmentID, "a.s-63.c-19999.ok")
				f, err := ajs.PublishMsgAsync(msg)
				if err != nil {
					b.Fatal(err)
				}
				cur.pubs = append(cur.pubs, f)
			}
			cur.last = m
			switch {
			case md.NumPending == 0:
				settle(&prev)
				settle(&cur)
			case n%ackBatch == 0 && !writes:
				settle(&cur)
			case n%ackBatch == 0:
				settle(&prev)
				prev, cur = cur, batch{pubs: prev.pubs[:0]}
			}
		}
		return acked(name)
	}
	// The machine is shared: interleave the three and compare the best
	// run of each (noise only ever slows a run down); the CPU figures are
	// of the same best runs.
	type best struct{ wall, cpu time.Duration }
	var rawT, writesT, recT best
	measure := func(b *best, i int, run func() time.Duration) {
		c := processCPU()
		d := run()
		if c = processCPU() - c; i == 0 || d < b.wall {
			*b = best{d, c}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(&rawT, i, func() time.Duration { return raw(false) })
		measure(&writesT, i, func() time.Duration { return raw(true) })
		measure(&recT, i, func() time.Duration { return f.classify(b) })
	}
	b.ReportMetric(float64(events)/rawT.wall.Seconds(), "raw_events/s")
	b.ReportMetric(float64(events)/recT.wall.Seconds(), "classified_events/s")
	b.ReportMetric(rawT.wall.Seconds()/recT.wall.Seconds(), "ratio")
	b.ReportMetric(writesT.wall.Seconds()/recT.wall.Seconds(), "ratio_same_writes")
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / events }
	b.ReportMetric(us(rawT.cpu), "raw_cpu_us/event")
	b.ReportMetric(us(writesT.cpu), "storing_cpu_us/event")
	b.ReportMetric(us(recT.cpu), "classify_cpu_us/event")
}

// BenchmarkPrepareRacing compares plan issuance by four recoverers racing
// on the same calls (each on its own connection; every call an idempotent
// tool's failure, retry_allowed) with its raw building blocks, measured
// in the same run: four goroutines racing a KV create of a plan-sized
// value per key, the winner publishing the plan with its id as
// Nats-Msg-Id. It reports plans/s of both and their ratio (best round of
// each; noise only slows a round down).
func BenchmarkPrepareRacing(b *testing.B) {
	const (
		racers = 4
		calls  = 150
	)
	srv, _, topo := streamtest.StartWith(b, streamtest.Config{})
	ctx := context.Background()
	topos := racerTopologies(b, srv, topo, racers)
	value := make([]byte, 520)
	var jwT, rawT time.Duration
	for n := 0; n < b.N; n++ {
		sessions := fillUncertain(b, topo, fmt.Sprintf("r%d", n), calls)
		recs := make([]*Recoverer, racers)
		for i := range recs {
			var err error
			if recs[i], err = New(Config{Topology: topos[i], Name: fmt.Sprintf("issuer%d", i), DisableService: true, PlannerKey: newPlanner(b)}); err != nil {
				b.Fatal(err)
			}
		}
		d := race(b, racers, func(i int) error {
			for _, s := range sessions {
				if _, err := recs[i].Prepare(ctx, s, "c-1"); err != nil {
					return err
				}
			}
			return nil
		})
		if n == 0 || d < jwT {
			jwT = d
		}
		d = race(b, racers, func(i int) error {
			for j := range calls {
				id := fmt.Sprintf("p-%d-%d", n, j)
				_, err := topos[i].PlanBucket.Create(ctx, "raw-"+id, value)
				if errors.Is(err, jetstream.ErrKeyExists) {
					continue
				}
				if err != nil {
					return err
				}
				if _, err := topos[i].JS.Publish(ctx, topo.Names().PlansSubject("raw"), value, jetstream.WithMsgID(id)); err != nil {
					return err
				}
			}
			return nil
		})
		if n == 0 || d < rawT {
			rawT = d
		}
	}
	b.ReportMetric(calls/jwT.Seconds(), "plans/s")
	b.ReportMetric(calls/rawT.Seconds(), "raw_plans/s")
	b.ReportMetric(rawT.Seconds()/jwT.Seconds(), "ratio")
}

// racerTopologies opens n topologies on topo's streams, each on its own
// connection to srv (closed when tb ends): racers that must not share a
// connection, as separate processes would not.
func racerTopologies(tb testing.TB, srv *natsnode.Embedded, topo *stream.Topology, n int) []*stream.Topology {
	tb.Helper()
	topos := make([]*stream.Topology, n)
	for i := range topos {
		nc, err := srv.Connect()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			tb.Fatal(err)
		}
		if topos[i], err = stream.OpenTopology(context.Background(), js, topo.Config()); err != nil {
			tb.Fatal(err)
		}
	}
	return topos
}

// race runs f(0) to f(n-1) at once, each in its own goroutine, and returns
// how long it took until all had returned; an error from any fails tb.
func race(tb testing.TB, n int, f func(i int) error) time.Duration {
	tb.Helper()
	start := time.Now()
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- f(i) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	d := time.Since(start)
	if first != nil {
		tb.Fatal(first)
	}
	return d
}
