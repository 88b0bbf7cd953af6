package stream

import (
	"context"
	"testing"
	"time"
)

// Forget drops the keys of a session with nothing left to write, keeps
// those with deferred counts, and a forgotten key still counts right.
func TestBudgetForget(t *testing.T) {
	ctx := context.Background()
	topo := setup(t, TopologyConfig{})
	b := NewBudgetWith(topo.Budget, BudgetConfig{FlushInterval: time.Hour})
	if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, "s-2", "t-1", 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Defer("s-1", "t-1"); !ok {
		t.Fatal("Defer refused a known, unlimited key")
	}
	// A deferred count is kept; the other session is not touched.
	b.Forget("s-1")
	b.mu.Lock()
	_, kept := b.keys["s-1.t-1"]
	_, other := b.keys["s-2.t-1"]
	b.mu.Unlock()
	if !kept || !other {
		t.Fatalf("after Forget: s-1.t-1 (a deferred count) kept %v, s-2.t-1 kept %v", kept, other)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.Forget("s-1")
	b.mu.Lock()
	n := len(b.keys)
	_, idx := b.bySession["s-1"]
	b.mu.Unlock()
	if n != 1 || idx {
		t.Fatalf("%d keys after Flush and Forget (index kept %v), want s-2's alone", n, idx)
	}
	u, err := b.Add(ctx, "s-1", "t-1", 0)
	if err != nil || u.ToolCalls != 3 {
		t.Fatalf("count after Forget: %+v %v, want 3 (added, deferred, added)", u, err)
	}
}
