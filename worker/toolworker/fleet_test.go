package toolworker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// owners counts the live partition leases by owner.
func owners(t *testing.T, topo *stream.Topology) map[string]int {
	t.Helper()
	leases, err := topo.Leases().PartitionLeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, lv := range leases {
		out[lv.Owner]++
	}
	return out
}

func requestConsumers(t *testing.T, topo *stream.Topology) int {
	t.Helper()
	n := 0
	for range topo.Requests.ConsumerNames(context.Background()).Name() {
		n++
	}
	return n
}

// Workers share the partitions: a worker alone owns them all, a second
// one that joins gets half (the first drains the rest), and when one
// stops the other takes everything back; requests published meanwhile
// all run, in order; at the end nothing is left.
func TestPartitionsRebalanceOnJoinAndLeave(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	n := topo.Names().Partitions()
	a := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), Owner: "tw-a", PollInterval: 20 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "a owns every partition", func() bool { return owners(t, topo)["tw-a"] == n })
	const sessions = 12
	for i := range sessions {
		publish(t, topo, sessionName(i), fmt.Sprintf("r-%d-0", i), "echo", `{"n":0}`)
	}
	b := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), Owner: "tw-b", PollInterval: 20 * time.Millisecond})
	for i := range sessions {
		publish(t, topo, sessionName(i), fmt.Sprintf("r-%d-1", i), "echo", `{"n":1}`)
	}
	streamtest.Eventually(t, 15*time.Second, "a and b own half each", func() bool {
		o := owners(t, topo)
		return o["tw-a"] == n/2 && o["tw-b"] == n/2 && len(a.w.OwnedPartitions()) == n/2 && len(b.w.OwnedPartitions()) == n/2
	})
	if c := requestConsumers(t, topo); c > n {
		t.Fatalf("%d request consumers, want at most %d", c, n)
	}
	a.stop(t)
	a.done = make(chan error, 1)
	a.done <- nil
	for i := range sessions {
		publish(t, topo, sessionName(i), fmt.Sprintf("r-%d-2", i), "echo", `{"n":2}`)
	}
	streamtest.Eventually(t, 15*time.Second, "b owns every partition", func() bool { return owners(t, topo)["tw-b"] == n })
	streamtest.Eventually(t, 15*time.Second, "every request ran", func() bool { return p.total() == 3*sessions })
	for i := range sessions {
		if got := p.ran(sessionName(i)); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
			t.Errorf("%s ran %v, want [0 1 2]", sessionName(i), got)
		}
	}
	b.stop(t)
	b.done = make(chan error, 1)
	b.done <- nil
	if o := owners(t, topo); len(o) != 0 {
		t.Fatalf("partition leases left: %v", o)
	}
	if c := requestConsumers(t, topo); c != 0 {
		var left []string
		for ci := range topo.Requests.ListConsumers(context.Background()).Info() {
			left = append(left, fmt.Sprintf("%s (%s, created %s)", ci.Name, ci.Config.Description, ci.Created.Format("15:04:05.000")))
		}
		t.Fatalf("%d request consumers left: %v", c, left)
	}
	if live, err := topo.Leases().LiveWorkers(context.Background()); err != nil || len(live) != 0 {
		t.Fatalf("registrations left: %v %v", live, err)
	}
}

// A full worker says so: with MaxSessions 1 and a body that blocks, a
// second session's request waits for the slot, counted in Stats, and runs
// once the slot is free.
func TestFullWorkerCountsWaits(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), MaxSessions: 1, PollInterval: 20 * time.Millisecond})
	publish(t, topo, "busy-1", "r-1", "block", `{}`)
	select {
	case <-p.started:
	case <-time.After(10 * time.Second):
		t.Fatal("body never started")
	}
	publish(t, topo, "busy-2", "r-2", "echo", `{"n":7}`)
	streamtest.Eventually(t, 10*time.Second, "the second session waits for a slot", func() bool {
		st := r.w.Stats()
		return st.Waiting == 1 && st.Waits >= 1 && st.Running == 1 && st.Held >= 0
	})
	if got := p.ran("busy-2"); len(got) != 0 {
		t.Fatalf("busy-2 ran %v while the only slot was taken", got)
	}
	close(p.gate)
	streamtest.Eventually(t, 10*time.Second, "the waiting session runs", func() bool { return len(p.ran("busy-2")) == 1 })
	if st := r.w.Stats(); st.Waiting != 0 {
		t.Fatalf("stats %+v after the slot freed", st)
	}
}
