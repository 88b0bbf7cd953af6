package stream

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/schema"
)

// planReader is LoadForPlan as a historyReader: it weighs the history as
// LoadHistory does (so a takeover WithLoaded counts the same limits).
var planReader = historyReader{name: "LoadForPlan", weighs: true, read: func(ctx context.Context, topo *Topology, session string) (Loaded, error) {
	return topo.Plans().LoadForPlan(ctx, session)
}}

// TestLoadForPlanIsLoad: at every length around a batch boundary, with
// other sessions interleaved, LoadForPlan returns exactly what Load (and a
// read through the leader's message gets) returns, weighs it as
// LoadHistory does (so a takeover WithLoaded counts the same limits), and
// reports a corrupt event wherever it is; an empty session is empty
// (testReaderAtBatchBoundaries).
func TestLoadForPlanIsLoad(t *testing.T) {
	testReaderAtBatchBoundaries(t, planReader)
}

// TestLoadForPlanLimits: a log over the event or byte limits is refused
// with history_too_large, as Load refuses it.
func TestLoadForPlanLimits(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []schema.Limits{{MaxEvents: 4}, {MaxBytes: 600}} {
		topo := setup(t, TopologyConfig{})
		startedLog(t, topo, "s-1", 6)
		topo.cfg.Limits = lim.WithDefaults() // read with limits the log is over
		if _, err := topo.Logs().Load(ctx, "s-1"); schema.CodeOf(err) != schema.CodeHistoryTooLarge {
			t.Fatalf("Load with %+v: %v, want history_too_large", lim, err)
		}
		if _, err := topo.Plans().LoadForPlan(ctx, "s-1"); schema.CodeOf(err) != schema.CodeHistoryTooLarge {
			t.Fatalf("LoadForPlan with %+v: %v, want history_too_large", lim, err)
		}
	}
}

// TestLoadForPlanConcurrent: many LoadForPlan at once on one connection,
// on sessions of different lengths, each get their own session's history
// (the answers share one subscription and are routed by reply token); no
// subscription is left behind per read. Loads racing appends to their
// session return a complete prefix of its log ending at or after the last
// event appended before they started.
func TestLoadForPlanConcurrent(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	const sessions = 12
	for i := range sessions {
		lg, err := topo.Logs().Fence(ctx, fmt.Sprintf("s-%d", i), "w1", 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := range i * 5 {
			if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d-%d", i, j)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := topo.Plans().LoadForPlan(ctx, "s-0"); err != nil { // the shared subscription
		t.Fatal(err)
	}
	subs := topo.JS.Conn().NumSubscriptions()
	var wg sync.WaitGroup
	errs := make(chan error, sessions*8)
	for range 8 {
		for i := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				session := fmt.Sprintf("s-%d", i)
				h, err := topo.Plans().LoadForPlan(ctx, session)
				if err != nil {
					errs <- err
					return
				}
				if len(h.Events) != 1+i*5 {
					errs <- fmt.Errorf("%s: %d events, want %d", session, len(h.Events), 1+i*5)
					return
				}
				for j, ev := range h.Events[1:] {
					if id := ev.CallID(); id != fmt.Sprintf("c-%d-%d", i, j) {
						errs <- fmt.Errorf("%s event %d is %q: another session's answer", session, j+1, id)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := topo.JS.Conn().NumSubscriptions(); n != subs {
		t.Fatalf("%d subscriptions after the loads, %d before", n, subs)
	}

	// Loads racing appends.
	lg, err := topo.Logs().OpenLog(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	appended := make(chan error, 1)
	var last uint64
	var mu sync.Mutex
	go func() {
		defer close(appended)
		for j := range 300 {
			select {
			case <-stop:
				return
			default:
			}
			seq, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("late-%d", j)}})
			if err != nil {
				appended <- err
				return
			}
			mu.Lock()
			last = seq
			mu.Unlock()
		}
	}()
	for range 20 {
		mu.Lock()
		before := last
		mu.Unlock()
		h, err := topo.Plans().LoadForPlan(ctx, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		n := len(h.Events)
		if h.Events[n-1].Seq < before {
			t.Fatalf("history ends at seq %d, before seq %d appended before the load", h.Events[n-1].Seq, before)
		}
		full, err := topo.Logs().Load(ctx, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(full) < n || !reflect.DeepEqual(full[:n], h.Events) {
			t.Fatalf("history of %d events is not a prefix of the log", n)
		}
	}
	close(stop)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
}

// TestLoadForPlanWithoutDirectGets: on a stream that does not allow direct
// gets, LoadForPlan reads as Load does and returns the same history.
func TestLoadForPlanWithoutDirectGets(t *testing.T) {
	testReaderWithoutDirectGets(t, planReader)
}

// TestBatchAnswerChecks: an answer whose messages do not chain (one lost
// on the way, a foreign one), a message that is not a batch answer, or an
// error status fails the get; an end-of-batch or "no messages" ends it.
func TestBatchAnswerChecks(t *testing.T) {
	msg := func(seq, prev uint64) *nats.Msg {
		m := nats.NewMsg("_INBOX.x.1")
		m.Header.Set("Nats-Sequence", fmt.Sprint(seq))
		m.Header.Set("Nats-Last-Sequence", fmt.Sprint(prev))
		m.Header.Set("Nats-Num-Pending", "0")
		m.Data = []byte(`{}`)
		return m
	}
	status := func(code, desc string) *nats.Msg {
		m := nats.NewMsg("_INBOX.x.1")
		m.Header.Set("Status", code)
		if desc != "" {
			m.Header.Set("Description", desc)
		}
		return m
	}
	plain := msg(3, 0)
	plain.Header.Del("Nats-Num-Pending")
	for _, tc := range []struct {
		name  string
		msgs  []*nats.Msg
		n     int
		fails bool
	}{
		{"chained", []*nats.Msg{msg(2, 0), msg(5, 2), msg(9, 5), status("204", "EOB")}, 3, false},
		{"no messages", []*nats.Msg{status("404", "Message Not Found")}, 0, false},
		{"first lost", []*nats.Msg{msg(5, 2), status("204", "EOB")}, 0, true},
		{"middle lost", []*nats.Msg{msg(2, 0), msg(9, 5), status("204", "EOB")}, 1, true},
		{"out of order", []*nats.Msg{msg(5, 0), msg(2, 5)}, 1, true},
		{"not a batch", []*nats.Msg{plain}, 0, true},
		{"error status", []*nats.Msg{status("408", "Request Timeout")}, 0, true},
		{"no responders", []*nats.Msg{status("503", "")}, 0, true},
		{"404 after messages", []*nats.Msg{msg(2, 0), status("404", "")}, 1, true},
	} {
		c := &batchCall{wake: make(chan struct{}, 1)}
		for _, m := range tc.msgs {
			if !c.done {
				c.add(m)
			}
		}
		if !c.done || len(c.msgs) != tc.n || (c.err != nil) != tc.fails {
			t.Errorf("%s: done %v, %d messages, err %v; want done, %d, fails %v", tc.name, c.done, len(c.msgs), c.err, tc.n, tc.fails)
		}
	}
}

// TestExtendLoaded: a history loaded before, extended after more appends,
// is what LoadHistory returns now (events and weight), from an empty one
// too; the limits count the loaded part, so a log that went over them is
// refused.
func TestExtendLoaded(t *testing.T) {
	topo := setup(t, TopologyConfig{})
	ctx := context.Background()
	lg, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	appendN := func(n int, from int) {
		for j := range n {
			if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: fmt.Sprintf("c-%d", from+j)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(4, 0)
	before, err := topo.Plans().LoadForPlan(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	appendN(3, 4)
	for _, l := range []Loaded{before, {}} {
		got, err := topo.Plans().ExtendLoaded(ctx, "s-1", l)
		if err != nil {
			t.Fatal(err)
		}
		want, err := topo.Logs().LoadHistory(ctx, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Events) != 8 || !reflect.DeepEqual(got.Events, want.Events) || got.bytes != want.bytes {
			t.Fatalf("extended from %d events: %d events (%d bytes), LoadHistory %d (%d bytes)", len(l.Events), len(got.Events), got.bytes, len(want.Events), want.bytes)
		}
	}
	// Nothing appended since: the same history.
	now, err := topo.Logs().LoadHistory(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if same, err := topo.Plans().ExtendLoaded(ctx, "s-1", now); err != nil || !reflect.DeepEqual(same.Events, now.Events) {
		t.Fatalf("extend with nothing new: %d events, %v", len(same.Events), err)
	}
	topo.cfg.Limits = schema.Limits{MaxEvents: 6}.WithDefaults()
	if _, err := topo.Plans().ExtendLoaded(ctx, "s-1", before); schema.CodeOf(err) != schema.CodeHistoryTooLarge {
		t.Fatalf("extend past the limit: %v, want history_too_large", err)
	}
}
