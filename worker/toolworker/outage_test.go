package toolworker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// electingRequests is JW_REQUESTS as a tool worker sees it just after a
// node loss: the first hang consumer creations are never answered (sent
// while the stream elected its leader; the nats client gives up after its
// 5 s default when the context has no deadline), and every creation takes
// delay (a loaded R3 cluster catching up).
type electingRequests struct {
	jetstream.Stream
	hang  atomic.Int32
	delay time.Duration
}

func (s *electingRequests) CreateConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if s.hang.Add(-1) >= 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Second):
			return nil, context.DeadlineExceeded
		}
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(s.delay):
	}
	return s.Stream.CreateConsumer(ctx, cfg)
}

// After a node loss every partition lease lapses at once and a worker
// takes its share again while some requests go unanswered: the takes run
// together and an unanswered consumer creation is sent again after 3 s,
// so a few of them cost one attempt, not 5 s each one after another
// (before: 6 hung creations held the partitions unowned for 30 s).
func TestUnansweredTakesDoNotSerializeTheShare(t *testing.T) {
	topo := setup(t)
	topo.Requests = &electingRequests{Stream: topo.Requests, hang: atomic.Int32{}}
	topo.Requests.(*electingRequests).hang.Store(6)
	n := topo.Names().Partitions()
	p := newProbe()
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), Owner: "tw-a", PollInterval: 50 * time.Millisecond})
	t0 := time.Now()
	streamtest.Eventually(t, 8*time.Second, "every partition owned", func() bool {
		return len(r.w.OwnedPartitions()) == n && owners(t, topo)["tw-a"] == n
	})
	t.Logf("%d partitions owned %v after start, 6 consumer creations unanswered", n, time.Since(t0).Round(10*time.Millisecond))
}

// A take whose consumer creation takes most of the lease TTL (an R3
// consumer made after a node loss) keeps its lease: it is renewed from
// the acquisition on, so the hold does not lapse before the partition
// runs (before: taken, then "not renewed within its TTL" at once, and
// taken again, over and over).
func TestSlowTakeKeepsItsLease(t *testing.T) {
	topo := setup(t) // lease TTL 1 s, renewals every 333 ms: each creation outlasts the TTL
	topo.Requests = &electingRequests{Stream: topo.Requests, delay: 1200 * time.Millisecond}
	n := topo.Names().Partitions()
	p := newProbe()
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), Owner: "tw-a", PollInterval: 50 * time.Millisecond})
	streamtest.Eventually(t, 15*time.Second, "every partition owned", func() bool { return len(r.w.OwnedPartitions()) == n })
	// Two more TTLs: a hold that lapsed shows as lost.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if st := r.w.Stats(); st.Lost > 0 {
			t.Fatalf("%d partitions lost after slow takes: %+v", st.Lost, st)
		}
		time.Sleep(50 * time.Millisecond) // polling the counter for a bounded span
	}
}
