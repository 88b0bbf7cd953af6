package streamtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchPullInbox watches, on nc (a test connection that may subscribe to
// anything), the pull requests of consumer on stream, and returns a
// function that waits up to 10 s for one and returns the inbox of the
// latest: the inbox that consumer's client reads its deliveries on (what a
// client of the account learns from the heartbeats sent there).
func WatchPullInbox(t testing.TB, nc *nats.Conn, stream, consumer string) func() string {
	t.Helper()
	var mu sync.Mutex
	var inbox string
	sub, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT."+stream+"."+consumer, func(m *nats.Msg) {
		mu.Lock()
		inbox = m.Reply
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() string {
		t.Helper()
		get := func() string {
			mu.Lock()
			defer mu.Unlock()
			return inbox
		}
		Eventually(t, 10*time.Second, "a pull request of "+consumer, func() bool { return get() != "" })
		return get()
	}
}

// Intrude makes a push consumer of st (filtered on filter, "" for all)
// deliver every message, unacknowledged, on deliverTo — another client's
// inbox: a consumer's deliver subject is checked against no permission —
// and waits up to 10 s until it delivered at least n.
func Intrude(t testing.TB, st jetstream.Stream, filter, deliverTo string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "intruder", FilterSubject: filter, DeliverSubject: deliverTo,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, "the intruder's deliveries", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Consumer >= uint64(n)
	})
}
