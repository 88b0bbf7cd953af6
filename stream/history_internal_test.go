package stream

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// TestLoadShortAndLongLogs: Load reads a log with batched direct gets of
// readBatch messages; at every length around a batch boundary, with other
// sessions interleaved, it returns exactly what a read through the stream
// leader's message gets returns, and a corrupt event is reported wherever
// it is.
func TestLoadShortAndLongLogs(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	lengths := []int{1, 2, readBatch - 1, readBatch, readBatch + 1, 2*readBatch + 3}
	for i, n := range lengths {
		session := fmt.Sprintf("s-%d", n)
		lg, err := topo.Fence(ctx, session, "w1", 1) // event 1
		if err != nil {
			t.Fatal(err)
		}
		other, err := topo.Fence(ctx, fmt.Sprintf("other-%d", i), "w1", 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < n; j++ {
			ev := schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", j)}}
			if _, err := lg.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
			if j%7 == 0 { // interleave another session now and then
				if _, err := other.Append(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, n := range lengths {
		session := fmt.Sprintf("s-%d", n)
		got, err := topo.Load(ctx, session)
		if err != nil {
			t.Fatalf("Load %s: %v", session, err)
		}
		want := leaderRead(t, topo, session)
		if len(got) != n || !reflect.DeepEqual(got, want) {
			t.Fatalf("Load %s: %d events, leader read %d, want %d and equal", session, len(got), len(want), n)
		}
	}
	if h, err := topo.Load(ctx, "s-none"); err != nil || h != nil {
		t.Fatalf("Load of an empty session = %v, %v", h, err)
	}

	// A corrupt event in the first batch and in a later one.
	for _, at := range []int{2, readBatch + 3} {
		session := fmt.Sprintf("corrupt-%d", at)
		lg, err := topo.Fence(ctx, session, "w1", 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := 2; j <= readBatch+5; j++ {
			if j == at {
				if _, err := topo.JS.Publish(ctx, topo.EventsSubject(session), []byte(`{"v":1,"type":"x","type":"y"}`)); err != nil {
					t.Fatal(err)
				}
				if lg, err = topo.OpenLog(ctx, session, "w1", 1); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", j)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := topo.Load(ctx, session); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Fatalf("Load with a corrupt event %d: %v, want corrupt_history", at, err)
		}
	}
}

// TestLoadWithoutDirectGets: on a stream that does not allow direct gets
// (an older deployment), Load reads through the leader and returns the same
// history.
func TestLoadWithoutDirectGets(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	lg, err := topo.Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for j := range 5 {
		if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", j)}}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := topo.Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := topo.Events.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := topo.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := topo.Load(ctx, "s-1")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Load without direct gets = %d events, %v; want %d", len(got), err, len(want))
	}
}

// leaderRead reads a session log through the leader's message gets only.
func leaderRead(t *testing.T, topo *Topology, session string) []schema.Event {
	t.Helper()
	var out []schema.Event
	tl, ok, err := topo.lastMsg(context.Background(), session)
	if err != nil || !ok {
		t.Fatalf("tail of %s: %v %v", session, ok, err)
	}
	err = topo.read(context.Background(), topo.Events.CachedInfo().Config.Name, topo.EventsSubject(session), 1, tl.seq, false, func(m *jetstream.RawStreamMsg) error {
		ev, err := schema.DecodeEvent(m.Data)
		if err != nil {
			return err
		}
		ev.Seq = m.Sequence
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
