package recoverer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestTakeoverRetriedSoonAfterLeaderReturns: a partition expiry whose
// takeovers get 503 for longer than a few backoff steps (a cluster
// electing a stream leader: 4–9 s with nats-server's raft) tries each
// session again within takeoverRetryMax (plus its jitter) of the stream
// answering again — not a second or more later, as a backoff grown to 1 s
// with jitter did (the chaos run's "leaders back → fence" time).
func TestTakeoverRetriedSoonAfterLeaderReturns(t *testing.T) {
	// A TTL of 3 s: the partition sweep (every TTL) hands a partition
	// handled more than two TTLs ago to a fresh takeover, whose backoff
	// starts again at its first step; the outage below ends before that.
	const ttl = 3 * time.Second
	e := setup(t, ttl)
	as := e.assessments()
	r := e.recoverer("a")
	var (
		failing atomic.Bool
		failed  atomic.Int64
		mu      sync.Mutex
		back    time.Time                // when the stream answers again
		retried = map[string]time.Time{} // each session's first attempt after it
	)
	failing.Store(true)
	r.leases.fault = func(s string) error {
		if failing.Load() {
			failed.Add(1)
			return errors.New("nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable")
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := retried[s]; !ok {
			retried[s] = time.Now()
		}
		return nil
	}
	e.run(r)
	calls := deadOwner(t, e.topo, 10)
	start := time.Now()
	// Failing for 5 s after the first failures: long enough for a backoff
	// to reach its cap, shorter than two TTLs.
	streamtest.Eventually(t, ttl+10*time.Second, "takeovers failing", func() bool { return failed.Load() >= int64(len(calls)) })
	time.Sleep(5 * time.Second) // the outage being simulated, not a wait for a condition
	mu.Lock()
	back = time.Now()
	failing.Store(false)
	mu.Unlock()
	stormCount(t, e, as, "a", calls, start, ttl+15*time.Second)
	mu.Lock()
	defer mu.Unlock()
	limit := takeoverRetryMax + takeoverRetryMax/2 // the cap and its jitter, and some room for a loaded machine
	for s := range calls {
		at, ok := retried[s]
		if !ok {
			t.Errorf("%s: never tried again after the stream answered", s)
			continue
		}
		if d := at.Sub(back); d > limit {
			t.Errorf("%s: tried again %s after the stream answered, want within %s", s, d.Round(time.Millisecond), limit)
		}
	}
}

// stallingKV is a jw_budget whose leader is gone: every read and write
// waits until its context ends.
type stallingKV struct{ jetstream.KeyValue }

func (stallingKV) Get(ctx context.Context, _ string) (jetstream.KeyValueEntry, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (stallingKV) Create(ctx context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (stallingKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (stallingKV) Put(ctx context.Context, _ string, _ []byte) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestTakeoverNotHeldByBudget: a takeover returns once its fence is
// written, whatever jw_budget does: the tool_calls reconcile after it is
// best effort, and one that waited for a jw_budget without a leader held
// the takeover's pool slot, the start's reconcile and so the lease watch.
func TestTakeoverNotHeldByBudget(t *testing.T) {
	const ttl = time.Second
	e := setup(t, ttl)
	r := e.recoverer("a")
	calls := deadOwner(t, e.topo, 1)
	var s string
	for k := range calls {
		s = k
	}
	ctx := context.Background()
	streamtest.Eventually(t, ttl+5*time.Second, "partition lease expired", func() bool {
		_, live, err := e.topo.Leases().PartitionHolder(ctx, e.topo.Names().PartitionOf(s))
		return err == nil && !live
	})
	e.topo.Budget = stallingKV{e.topo.Budget}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	as, err := r.TakeOver(cctx, s)
	took := time.Since(start)
	if err != nil || len(as) != 1 {
		t.Fatalf("TakeOver: %d assessments, %v", len(as), err)
	}
	if took > 2*time.Second {
		t.Errorf("takeover returned after %s, held by jw_budget", took.Round(time.Millisecond))
	}
}
