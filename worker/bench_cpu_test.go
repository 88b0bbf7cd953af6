package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// nopLog is an Appender that acknowledges every event at once, with an
// empty log (LastSeq 0): the runtime knows its history.
type nopLog struct {
	mu  sync.Mutex
	seq uint64
}

func (l *nopLog) Append(_ context.Context, ev schema.Event) (uint64, error) {
	if _, err := schema.EncodeEvent(ev); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return l.seq, nil
}

func (l *nopLog) LastSeq() uint64 { return 0 }

// nopCounter is a DeferringCounter that keeps its counts in memory.
type nopCounter struct{}

func (nopCounter) Add(context.Context, string, string, int64) (stream.Usage, error) {
	return stream.Usage{ToolCalls: 1}, nil
}
func (nopCounter) Defer(string, string) (stream.Usage, bool) { return stream.Usage{ToolCalls: 1}, true }
func (nopCounter) Reconcile(context.Context, string, string, int64, int64) (stream.Usage, error) {
	return stream.Usage{}, nil
}

// BenchmarkRuntimeCallCPU measures the runtime's own cost of a call with a
// no-op tool: a log that acknowledges at once (after encoding the event, as
// stream.Log does) and a counter in memory. Such a log is not a
// *stream.Log, so each append also pays for a write context (writeContext),
// which a *stream.Log's appends do not (AppendFor).
func BenchmarkRuntimeCallCPU(b *testing.B) {
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: "s-1", Log: &nopLog{}, Registry: reg, Plans: stubPlans{}, Budget: nopCounter{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if res, err := rt.Call(ctx, "noop", args); err != nil || res.Status != schema.StatusOK {
			b.Fatal(res.Status, err)
		}
	}
}

// stubPlans is a PlanStore that holds no plans.
type stubPlans struct{}

func (stubPlans) Get(context.Context, string) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
func (stubPlans) Consume(context.Context, stream.PlanRecord, string, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
func (stubPlans) Complete(context.Context, stream.PlanRecord, uint64) (stream.PlanRecord, error) {
	return stream.PlanRecord{}, stream.ErrPlanNotIssued
}
