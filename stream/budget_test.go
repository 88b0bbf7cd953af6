package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestBudgetAdd(t *testing.T) {
	ctx := context.Background()
	b := stream.NewBudget(kvForPlanTest(t, "jw_budget"))

	tests := []struct {
		name          string
		session, task string
		limit         int64
		wantCalls     int64
		wantLimit     int64
		wantOver      bool
	}{
		{"first call creates with limit", "s-1", "t-1", 2, 1, 2, false},
		{"second call within limit", "s-1", "t-1", 9, 2, 2, false}, // limit of an existing key is kept
		{"third call over limit", "s-1", "t-1", 2, 3, 2, true},
		{"other task counts apart", "s-1", "t-2", 0, 1, 0, false},
		{"other session counts apart", "s-2", "t-1", 1, 1, 1, false},
		{"unlimited never over", "s-1", "t-2", 0, 2, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := b.Add(ctx, tt.session, tt.task, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if u.ToolCalls != tt.wantCalls || u.Limit != tt.wantLimit || u.Over() != tt.wantOver {
				t.Fatalf("usage %+v over=%v, want calls %d limit %d over %v", u, u.Over(), tt.wantCalls, tt.wantLimit, tt.wantOver)
			}
			got, err := b.Get(ctx, tt.session, tt.task)
			if err != nil || got.ToolCalls != tt.wantCalls {
				t.Fatalf("Get %+v, %v", got, err)
			}
		})
	}
}

func TestBudgetInvalidKey(t *testing.T) {
	b := stream.NewBudget(kvForPlanTest(t, "jw_budget"))
	for _, task := range []string{"", "a.b", "a b", "*"} {
		if _, err := b.Add(context.Background(), "s-1", task, 0); !errors.Is(err, stream.ErrInvalidBudgetKey) {
			t.Errorf("task %q: %v, want ErrInvalidBudgetKey", task, err)
		}
	}
}

func TestBudgetSetLimitKeepsCount(t *testing.T) {
	ctx := context.Background()
	b := stream.NewBudget(kvForPlanTest(t, "jw_budget"))
	if u, err := b.SetLimit(ctx, "s-1", "t-1", 1); err != nil || u.ToolCalls != 0 || u.Limit != 1 {
		t.Fatalf("SetLimit new: %+v, %v", u, err)
	}
	for range 2 {
		if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
			t.Fatal(err)
		}
	}
	u, err := b.SetLimit(ctx, "s-1", "t-1", 5)
	if err != nil || u.ToolCalls != 2 || u.Limit != 5 {
		t.Fatalf("SetLimit existing: %+v, %v", u, err)
	}
}

// TestBudgetConcurrent counts from several stores on one bucket (as separate
// processes would, each with its own cache) and checks no increment is lost.
func TestBudgetConcurrent(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_budget")
	const stores, each = 4, 25
	var wg sync.WaitGroup
	for range stores {
		b := stream.NewBudget(kv)
		wg.Go(func() {
			for range each {
				if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	u, err := stream.NewBudget(kv).Get(ctx, "s-1", "t-1")
	if err != nil {
		t.Fatal(err)
	}
	if u.ToolCalls != stores*each {
		t.Fatalf("tool_calls = %d, want %d", u.ToolCalls, stores*each)
	}
}

// stored reads a key through a Budget of its own (another process's view):
// what jw_budget holds, without this test's deferred counts.
func stored(t *testing.T, kv jetstream.KeyValue, session, task string) stream.Usage {
	t.Helper()
	u, err := stream.NewBudget(kv).Get(context.Background(), session, task)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestBudgetDefer: a key is deferred only once it is known to have no
// limit; deferred counts are not in jw_budget until they are flushed, and
// then all of them are, in one write; Get on the same Budget flushes first.
func TestBudgetDefer(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_budget")
	b := stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: time.Hour})
	if _, ok := b.Defer("s-1", "t-1"); ok {
		t.Fatal("Defer of an unknown key counted")
	}
	if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		u, ok := b.Defer("s-1", "t-1")
		if !ok || u.ToolCalls != int64(i+2) {
			t.Fatalf("Defer %d: %+v %v", i, u, ok)
		}
	}
	rev0, _ := kv.Get(ctx, "s-1.t-1")
	if u := stored(t, kv, "s-1", "t-1"); u.ToolCalls != 1 {
		t.Fatalf("stored before flush %+v, want 1 (deferred)", u)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rev1, _ := kv.Get(ctx, "s-1.t-1")
	if u := stored(t, kv, "s-1", "t-1"); u.ToolCalls != 6 || rev1.Revision() != rev0.Revision()+1 {
		t.Fatalf("stored after flush %+v (revision %d → %d), want 6 in one write", u, rev0.Revision(), rev1.Revision())
	}
	b.Defer("s-1", "t-1")
	if u, err := b.Get(ctx, "s-1", "t-1"); err != nil || u.ToolCalls != 7 {
		t.Fatalf("Get %+v %v, want 7", u, err)
	}

	// A key with a limit is never deferred: its count decides admission.
	if _, err := b.Add(ctx, "s-1", "t-2", 5); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Defer("s-1", "t-2"); ok {
		t.Fatal("Defer of a limited key counted")
	}
}

// TestBudgetDeferFlushesOnItsOwn: deferred counts reach jw_budget within
// the flush interval without anyone calling Flush.
func TestBudgetDeferFlushesOnItsOwn(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_budget")
	b := stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: 10 * time.Millisecond})
	if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.Defer("s-1", "t-1")
	}
	streamtest.Eventually(t, 10*time.Second, "the deferred counts written", func() bool {
		return stored(t, kv, "s-1", "t-1").ToolCalls == 4
	})
}

// TestBudgetDeferConcurrentProcesses: two Budgets (two processes) count
// the same key, each mostly deferred, from many goroutines; after both
// flush, the count is exact: nothing lost, nothing counted twice.
func TestBudgetDeferConcurrentProcesses(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_budget")
	procs := []*stream.Budget{
		stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: time.Millisecond}),
		stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: 5 * time.Millisecond}),
	}
	const perG, goroutines = 40, 4
	var wg sync.WaitGroup
	for _, b := range procs {
		for range goroutines {
			wg.Go(func() {
				for i := range perG {
					if i%10 == 0 {
						if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
							t.Error(err)
						}
						continue
					}
					if _, ok := b.Defer("s-1", "t-1"); !ok {
						if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
							t.Error(err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for _, b := range procs {
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u := stored(t, kv, "s-1", "t-1"); u.ToolCalls != 2*goroutines*perG {
		t.Fatalf("tool_calls %d, want %d", u.ToolCalls, 2*goroutines*perG)
	}
}

// TestBudgetDeferSeesNewLimit: a limit set by another process on a key
// this Budget defers is learnt at the next write; from then on the key is
// counted at once again.
func TestBudgetDeferSeesNewLimit(t *testing.T) {
	ctx := context.Background()
	kv := kvForPlanTest(t, "jw_budget")
	b := stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: time.Hour})
	if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
		t.Fatal(err)
	}
	b.Defer("s-1", "t-1")
	if _, err := stream.NewBudget(kv).SetLimit(ctx, "s-1", "t-1", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Defer("s-1", "t-1"); ok {
		t.Fatal("deferred a key that now has a limit")
	}
	u, err := b.Add(ctx, "s-1", "t-1", 0)
	if err != nil || u.ToolCalls != 3 || !u.Over() {
		t.Fatalf("Add %+v %v, want 3 over the limit 2", u, err)
	}
}

// TestBudgetReconcile: the count is raised to what the history recorded,
// never lowered, and this Budget's pending counts are kept.
func TestBudgetReconcile(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name              string
		stored, deferred  int64 // before: stored count (-1: no key), counts deferred here
		recorded, limit   int64
		wantCalls, wantLt int64
	}{
		{"no key: created at recorded with limit", -1, 0, 3, 7, 3, 7},
		{"stored behind the history: raised", 2, 0, 5, 0, 5, 0},
		{"stored ahead of the history: kept", 6, 0, 4, 0, 6, 0},
		{"pending counts kept", 2, 3, 4, 0, 5, 0},
		{"history beyond stored plus pending", 2, 1, 9, 0, 9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := kvForPlanTest(t, "jw_budget")
			b := stream.NewBudgetWith(kv, stream.BudgetConfig{FlushInterval: time.Hour})
			if tt.stored >= 0 {
				if _, err := b.SetLimit(ctx, "s-1", "t-1", 0); err != nil {
					t.Fatal(err)
				}
				for range tt.stored {
					if _, err := b.Add(ctx, "s-1", "t-1", 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			for range tt.deferred {
				if _, ok := b.Defer("s-1", "t-1"); !ok {
					t.Fatal("not deferred")
				}
			}
			u, err := b.Reconcile(ctx, "s-1", "t-1", tt.recorded, tt.limit)
			if err != nil || u.ToolCalls != tt.wantCalls || u.Limit != tt.wantLt {
				t.Fatalf("Reconcile %+v %v, want %d limit %d", u, err, tt.wantCalls, tt.wantLt)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := stored(t, kv, "s-1", "t-1"); got.ToolCalls != tt.wantCalls {
				t.Fatalf("stored %+v, want %d", got, tt.wantCalls)
			}
		})
	}
}
