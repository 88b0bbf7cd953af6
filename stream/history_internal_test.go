package stream

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// TestLoadShortAndLongLogs: Load reads the first shortLog events with
// message gets and the rest through a consumer; at every length around the
// switch, with other sessions interleaved, it returns exactly what a
// consumer-only read returns, and a corrupt event is reported on either
// side of the switch.
func TestLoadShortAndLongLogs(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	lengths := []int{1, shortLog - 1, shortLog, shortLog + 1, 3*shortLog + 2}
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
			if _, err := other.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range lengths {
		session := fmt.Sprintf("s-%d", n)
		got, err := topo.Load(ctx, session)
		if err != nil {
			t.Fatalf("Load %s: %v", session, err)
		}
		want := scanAll(t, topo, session)
		if len(got) != n || !reflect.DeepEqual(got, want) {
			t.Fatalf("Load %s: %d events, consumer read %d, want %d and equal", session, len(got), len(want), n)
		}
	}
	if h, err := topo.Load(ctx, "s-none"); err != nil || h != nil {
		t.Fatalf("Load of an empty session = %v, %v", h, err)
	}

	// A corrupt event among the gets and among the consumer's messages.
	for _, at := range []int{2, shortLog + 3} {
		session := fmt.Sprintf("corrupt-%d", at)
		lg, err := topo.Fence(ctx, session, "w1", 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := 2; j <= shortLog+5; j++ {
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

// scanAll reads a session log through the consumer only.
func scanAll(t *testing.T, topo *Topology, session string) []schema.Event {
	t.Helper()
	var out []schema.Event
	tl, ok, err := topo.lastMsg(context.Background(), session)
	if err != nil || !ok {
		t.Fatalf("tail of %s: %v %v", session, ok, err)
	}
	err = topo.scan(context.Background(), session, tl.seq, false, func(m jetstream.Msg, seq uint64, _ int) error {
		ev, err := schema.DecodeEvent(m.Data())
		if err != nil {
			return err
		}
		ev.Seq = seq
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
