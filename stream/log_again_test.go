package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestSameEventAgainAfterALostAnswerIsOnTheLogOnce: an append whose publish
// is held on the way (the writer's connection frozen) gives up unanswered;
// the held publish then reaches the server and is stored. The writer
// appends the very same event again (what the runtime does with a
// tool.result it could not confirm): the Log finds the first copy and
// returns its sequence instead of storing a second one, and the next
// event follows normally.
func TestSameEventAgainAfterALostAnswerIsOnTheLogOnce(t *testing.T) {
	srv, _, topo := streamtest.Start(t)
	ctx := context.Background()
	px := streamtest.NewFreezeProxy(t, srv.ClientURL())
	nc, err := nats.Connect(px.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	topo1, err := stream.OpenTopology(ctx, js, topo.Config())
	if err != nil {
		t.Fatal(err)
	}
	const session = "s-again"
	l, err := topo1.Logs().Fence(ctx, session, "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := schema.Event{Type: schema.TypeResult, At: time.Now().UTC().Truncate(time.Millisecond),
		Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Error: "boom"}}

	px.Freeze()
	if _, err := l.AppendFor(ctx, ev, 300*time.Millisecond); err == nil {
		t.Fatal("append through a frozen connection was answered")
	}
	px.Thaw() // the held publish reaches the server
	var first uint64
	streamtest.Eventually(t, 10*time.Second, "the held publish stored", func() bool {
		for _, e := range history(t, topo, session) {
			if e.Type == schema.TypeResult {
				first = e.Seq
			}
		}
		return first > 0
	})

	seq, err := l.AppendFor(ctx, ev, 5*time.Second)
	if err != nil {
		t.Fatalf("the same event again: %v", err)
	}
	if seq != first {
		t.Fatalf("the same event again got seq %d, want the first copy's %d", seq, first)
	}
	next, err := l.AppendFor(ctx, started("c-2"), 5*time.Second)
	if err != nil || next <= seq {
		t.Fatalf("the next event: seq %d, %v (after %d)", next, err, seq)
	}
	n := 0
	for _, e := range history(t, topo, session) {
		if e.Type == schema.TypeResult {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d tool.result events on the log, want 1", n)
	}
}

func history(t *testing.T, topo *stream.Topology, session string) []schema.Event {
	t.Helper()
	h, err := topo.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
