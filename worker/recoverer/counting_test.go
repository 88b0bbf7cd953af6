package recoverer

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// countedHook records, for each assessment reported, whether its
// recoverer counted at that moment.
type countedHook struct {
	mu      sync.Mutex
	r       *Recoverer
	counted map[string]bool // assessment id → counted when reported
}

func (h *countedHook) Assessed(a schema.Assessment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r != nil {
		h.counted[a.ID()] = h.counted[a.ID()] || h.r.Counting()
	}
}
func (h *countedHook) TookOver(string, []schema.Event, []schema.Assessment) {}

func (h *countedHook) snapshot() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]bool, len(h.counted))
	for k, v := range h.counted {
		out[k] = v
	}
	return out
}

func (e *env) countingRecoverer(name string) (*Recoverer, *countedHook) {
	h := &countedHook{counted: map[string]bool{}}
	r := e.recoverer(name, func(c *Config) { c.Observer = h; c.DisableService = true })
	h.mu.Lock()
	h.r = r
	h.mu.Unlock()
	return r, h
}

func finishCalls(w *writer, prefix string, n int) {
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusOK, "")
	}
}

// TestCountingOneAtATime: of two recoverers with an Observer exactly one
// counts; stopped (its lease released), the other counts from then on; a
// recoverer that takes the counting over does not count the assessments
// of the events stored before it took it (the previous holder may have
// counted those), but counts those after.
func TestCountingOneAtATime(t *testing.T) {
	e := setup(t, time.Second)
	w := e.writer("s-count", "w1")
	finishCalls(w, "before", 50) // a backlog before any recoverer runs

	a, ha := e.countingRecoverer("a")
	stopA := e.run(a)
	streamtest.Eventually(t, 20*time.Second, "a counts and assessed the backlog", func() bool {
		return a.Counting() && len(ha.snapshot()) == 50
	})
	for id, counted := range ha.snapshot() {
		if counted {
			t.Fatalf("%s of the backlog before the lease was taken counted", id)
		}
	}
	b, hb := e.countingRecoverer("b")
	e.run(b)
	finishCalls(w, "during", 20)
	streamtest.Eventually(t, 20*time.Second, "both assessed the new calls", func() bool {
		return len(ha.snapshot()) == 70 && len(hb.snapshot()) == 70
	})
	if b.Counting() {
		t.Fatal("b counts while a does")
	}
	for id, counted := range hb.snapshot() {
		if counted {
			t.Fatalf("b counted %s while a held the lease", id)
		}
	}
	nA := 0
	for _, counted := range ha.snapshot() {
		if counted {
			nA++
		}
	}
	if nA != 20 {
		t.Fatalf("a counted %d of the 20 calls made while it held the lease", nA)
	}

	stopA()
	if a.Counting() {
		t.Fatal("a still counts once stopped")
	}
	streamtest.Eventually(t, 20*time.Second, "b takes the counting over", b.Counting)
	finishCalls(w, "after", 10)
	streamtest.Eventually(t, 20*time.Second, "b assessed the calls after", func() bool { return len(hb.snapshot()) == 80 })
	for id, counted := range hb.snapshot() {
		if want := id[:len("a.s-count.after")] == "a.s-count.after"; counted != want {
			t.Errorf("b: %s counted %v, want %v", id, counted, want)
		}
	}
}
