package recoverer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestLostDeliveriesAreDeliveredAgain: deliveries of the classifier's
// consumer that never reach it (here taken by another pull on the same
// durable and never acknowledged, as a pull answered after its client
// lost the connection to a node that died) are not acknowledged by the
// next batch's AckAll: the classifier sees the gap in the consumer
// sequence, settles what it classified and starts again from the ack
// floor, so every call is assessed once, from its own events — none left
// unassessed, none closed later by a fence as never started (the chaos
// run's "closed calls never assessed" and "wrong assessments").
func TestLostDeliveriesAreDeliveredAgain(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	r := e.recoverer("a", func(c *Config) { c.DisableService = true })
	e.run(r)
	w := e.writer("s-0", "w1")
	w.call("c-0", "orders.create", effect.Idempotent, "k-0")
	w.result("c-0", schema.StatusOK, "")
	as.wait(t, "s-0", "c-0", 5*time.Second)

	// A thief's pull on the classifier's durable: the server serves the
	// waiting pulls in turn, so it takes some of the events below.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("EVENTS"), e.topo.Prefix+"-recoverer-a-events")
	if err != nil {
		t.Fatal(err)
	}
	stolen := make(chan int, 1)
	go func() {
		n := 0
		if batch, err := cons.Fetch(3, jetstream.FetchMaxWait(3*time.Second)); err == nil {
			for range batch.Messages() {
				n++ // never acknowledged
			}
		}
		stolen <- n
	}()
	// Let the thief's pull reach the server before the events do.
	streamtest.Eventually(t, 5*time.Second, "thief's pull waiting", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting >= 2
	})

	const calls = 6
	for i := 1; i <= calls; i++ {
		w := e.writer(fmt.Sprintf("s-%d", i), "w1")
		id := fmt.Sprintf("c-%d", i)
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusOK, "")
	}
	if n := <-stolen; n == 0 {
		t.Skip("the thief's pull took no delivery: nothing was lost")
	}
	for i := 1; i <= calls; i++ {
		s, id := fmt.Sprintf("s-%d", i), fmt.Sprintf("c-%d", i)
		a := as.wait(t, s, id, 15*time.Second)
		if a.Outcome != schema.OutcomeCompleted || a.Evidence != "ok" {
			t.Errorf("%s/%s assessed %s/%s, want completed/ok from its result", s, id, a.Outcome, a.Evidence)
		}
	}
}
