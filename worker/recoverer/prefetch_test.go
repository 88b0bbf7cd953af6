package recoverer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// prefetchFixture publishes n events (every 7th one not JSON) over three
// sessions and returns a running prefetch of a fresh consumer of them.
func prefetchFixture(t *testing.T, n int) *prefetch {
	t.Helper()
	e := setup(t, 0)
	ctx := context.Background()
	for i := range n {
		s := fmt.Sprintf("s-%d", i%3)
		data := []byte(fmt.Sprintf(`{"v":1,"session":%q,"epoch":1,"at":"2026-01-01T00:00:00Z","type":"tool.started","started":{"call_id":"c-%d"}}`, s, i))
		if i%7 == 3 {
			data = []byte("not json")
		}
		if _, err := e.topo.JS.PublishAsync(e.topo.EventsSubject(s), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.topo.JS.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	cons, err := e.topo.JS.CreateOrUpdateConsumer(ctx, e.topo.StreamName("EVENTS"), eventsConsumerConfig("prefetch"))
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	pf := startPrefetch(ctx, it)
	t.Cleanup(pf.stop)
	return pf
}

// TestPrefetchInOrderAndWhole: every delivery comes through, in delivery
// order, decoded as DecodeEvent decodes it (its error included), and the
// last one without waiting for another: a delivery that leaves nothing
// pending is never held back in a slice. Acks are sent as the classifier
// would (one per ackBatch), so MaxAckPending never blocks the consumer.
func TestPrefetchInOrderAndWhole(t *testing.T) {
	const n = 3*ackBatch + 17
	pf := prefetchFixture(t, n)
	for i := range n {
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := pf.next(wait)
		cancel()
		if err != nil {
			t.Fatalf("delivery %d of %d: %v", i+1, n, err)
		}
		if d.d.consumer != uint64(i+1) || d.d.stream != uint64(i+1) {
			t.Fatalf("delivery %d: consumer seq %d stream seq %d", i+1, d.d.consumer, d.d.stream)
		}
		ev, err := schema.DecodeEvent(d.m.Data())
		if (err == nil) != (d.err == nil) || err == nil && (ev.Session != d.ev.Session || ev.Started.CallID != d.ev.Started.CallID) {
			t.Fatalf("delivery %d decoded as %+v, %v; DecodeEvent says %+v, %v", i+1, d.ev, d.err, ev, err)
		}
		if (i+1)%ackBatch == 0 {
			if err := d.m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if i == n-1 && d.d.pending != 0 {
			t.Fatalf("last delivery has %d pending", d.d.pending)
		}
	}
	// Nothing more: the wait ends with its own error.
	wait, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := pf.next(wait); err != context.DeadlineExceeded {
		t.Fatalf("next past the last delivery: %v, want the wait's deadline", err)
	}
}

// TestPrefetchStopWhileAhead: stop ends the reader while it is blocked
// handing over slices nobody reads (the classifier returned at a gap or a
// stall), and next then reports the end.
func TestPrefetchStopWhileAhead(t *testing.T) {
	pf := prefetchFixture(t, maxAckPending)
	if _, err := pf.next(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { pf.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return while the reader was ahead")
	}
	for {
		_, err := pf.next(context.Background())
		if err != nil {
			break // the remaining slices, then the reader's end
		}
	}
}
