package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jingwei/jingwei/stream"
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
