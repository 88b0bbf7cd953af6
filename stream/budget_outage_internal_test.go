package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// electingKV is jw_budget while its stream elects a leader: the first
// drop reads and the first dropWrites compare-and-sets are never
// answered (and not stored); the caller waits until its context ends.
type electingKV struct {
	jetstream.KeyValue
	drop, dropWrites atomic.Int32
}

func (kv *electingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if kv.drop.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return kv.KeyValue.Get(ctx, key)
}

func (kv *electingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if kv.dropWrites.Add(-1) >= 0 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return kv.KeyValue.Update(ctx, key, value, rev)
}

// A budget request the server drops fails after AttemptTimeout with a
// transient error (the runtime counts again), not at the caller's much
// later deadline (a call's write timeout; before: the count, and the
// call, waited for it and the call was left not started); the failed
// counts stay pending and land with the next one, each exactly once.
func TestBudgetUnansweredRequestFailsFastAndTransient(t *testing.T) {
	ctx := context.Background()
	topo := setup(t, TopologyConfig{})
	kv := &electingKV{KeyValue: topo.Budget}
	b := NewBudgetWith(kv, BudgetConfig{AttemptTimeout: 200 * time.Millisecond})
	if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil { // created: known from here on
		t.Fatal(err)
	}
	kv.dropWrites.Store(1)
	kv.drop.Store(1)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, what := range []string{"compare-and-set", "read"} {
		start := time.Now()
		_, err := b.Add(cctx, "s-1", "t-1", 0)
		if err == nil || !Transient(err) {
			t.Fatalf("%s unanswered: %v, want a transient error", what, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s unanswered: failed after %v, want about the attempt timeout", what, took)
		}
		if i == 0 {
			b.mu.Lock()
			b.state("s-1.t-1").known = false // the failed write leaves the key to be read again
			b.mu.Unlock()
		}
	}
	u, err := b.Add(cctx, "s-1", "t-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if u, err = b.Get(ctx, "s-1", "t-1"); err != nil || u.ToolCalls != 4 {
		t.Fatalf("four counts, two of them unanswered once: %+v %v stored, want 4 tool calls", u, err)
	}
}
