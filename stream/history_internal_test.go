package stream

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// historyReader is one way of reading a session's whole history that must
// return what Load returns: Load itself, or LoadForPlan.
type historyReader struct {
	name string
	read func(ctx context.Context, topo *Topology, session string) (Loaded, error)
	// weighs: read weighs the history (Loaded.bytes) as LoadHistory does,
	// so it is checked against LoadHistory's weight too.
	weighs bool
}

// loadReader is Load as a historyReader (it does not weigh).
var loadReader = historyReader{name: "Load", read: func(ctx context.Context, topo *Topology, session string) (Loaded, error) {
	evs, err := topo.Logs().Load(ctx, session)
	return Loaded{Events: evs}, err
}}

// testReaderAtBatchBoundaries checks r at every length around a batch
// boundary of readBatch messages, with other sessions interleaved: it
// returns exactly what LoadHistory and a read through the stream leader's
// message gets return (and, when r.weighs, weighs it as LoadHistory does);
// an empty session is empty; an invalid session id fails as Load fails; a
// corrupt event in the first batch or a later one is a corrupt_history.
func testReaderAtBatchBoundaries(t *testing.T, r historyReader) {
	t.Helper()
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	lengths := []int{1, 2, 3, readBatch - 1, readBatch, readBatch + 1, 2*readBatch + 3}
	for i, n := range lengths {
		lg, err := topo.Logs().Fence(ctx, fmt.Sprintf("s-%d", n), "w1", 1) // event 1
		if err != nil {
			t.Fatal(err)
		}
		other, err := topo.Logs().Fence(ctx, fmt.Sprintf("other-%d", i), "w1", 1)
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
		got, err := r.read(ctx, topo, session)
		if err != nil {
			t.Fatalf("%s %s: %v", r.name, session, err)
		}
		want, err := topo.Logs().LoadHistory(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Events) != n || !reflect.DeepEqual(got.Events, want.Events) || !reflect.DeepEqual(got.Events, leaderRead(t, topo, session)) {
			t.Fatalf("%s %s: %d events, LoadHistory %d, want %d and equal to it and to the leader read", r.name, session, len(got.Events), len(want.Events), n)
		}
		if r.weighs && got.bytes != want.bytes {
			t.Fatalf("%s %s weighs %d bytes, LoadHistory %d", r.name, session, got.bytes, want.bytes)
		}
	}
	if h, err := r.read(ctx, topo, "s-none"); err != nil || h.Events != nil {
		t.Fatalf("%s of an empty session = %v, %v", r.name, h.Events, err)
	}
	_, lerr := topo.Logs().Load(ctx, "bad session!")
	if _, err := r.read(ctx, topo, "bad session!"); err == nil || lerr == nil || err.Error() != lerr.Error() {
		t.Fatalf("%s of an invalid session id: %v, want Load's %v", r.name, err, lerr)
	}

	// A corrupt event in the first batch and in a later one.
	for _, at := range []int{2, readBatch + 3} {
		session := fmt.Sprintf("corrupt-%d", at)
		lg, err := topo.Logs().Fence(ctx, session, "w1", 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := 2; j <= readBatch+5; j++ {
			if j == at {
				if _, err := topo.JS.Publish(ctx, topo.Names().EventsSubject(session), []byte(`{"v":1,"type":"x","type":"y"}`)); err != nil {
					t.Fatal(err)
				}
				if lg, err = topo.Logs().OpenLog(ctx, session, "w1", 1); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", j)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.read(ctx, topo, session); schema.CodeOf(err) != schema.CodeCorruptHistory {
			t.Fatalf("%s with a corrupt event %d: %v, want corrupt_history", r.name, at, err)
		}
	}
}

// testReaderWithoutDirectGets checks that on a stream that does not allow
// direct gets (an older deployment) r reads through the leader and returns
// the history Load returned while they were allowed.
func testReaderWithoutDirectGets(t *testing.T, r historyReader) {
	t.Helper()
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	startedLog(t, topo, "s-1", 5)
	want, err := topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := topo.Events.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := topo.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := r.read(ctx, topo, "s-1")
	if err != nil || !reflect.DeepEqual(got.Events, want) {
		t.Fatalf("%s without direct gets = %d events, %v; want %d", r.name, len(got.Events), err, len(want))
	}
}

// TestLoadShortAndLongLogs: Load reads a log with batched direct gets of
// readBatch messages; at every length around a batch boundary, with other
// sessions interleaved, it returns exactly what a read through the stream
// leader's message gets returns, and a corrupt event is reported wherever
// it is (testReaderAtBatchBoundaries).
func TestLoadShortAndLongLogs(t *testing.T) {
	testReaderAtBatchBoundaries(t, loadReader)
}

// TestLoadWithoutDirectGets: on a stream that does not allow direct gets
// (an older deployment), Load reads through the leader and returns the same
// history.
func TestLoadWithoutDirectGets(t *testing.T) {
	testReaderWithoutDirectGets(t, loadReader)
}

// leaderRead reads a session log through the leader's message gets only.
func leaderRead(t *testing.T, topo *Topology, session string) []schema.Event {
	t.Helper()
	var out []schema.Event
	tl, ok, err := topo.Logs().lastMsg(context.Background(), session)
	if err != nil || !ok {
		t.Fatalf("tail of %s: %v %v", session, ok, err)
	}
	err = topo.Reader().read(context.Background(), topo.Events.CachedInfo().Config.Name, topo.Names().EventsSubject(session), 1, tl.seq, false, func(m *jetstream.RawStreamMsg) error {
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
