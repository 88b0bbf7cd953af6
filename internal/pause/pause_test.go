package pause

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	start := time.Now()
	if err := For(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("For(20ms) = %v after %s", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start = time.Now()
	if err := For(ctx, time.Minute); !errors.Is(err, context.Canceled) || time.Since(start) > 30*time.Second {
		t.Fatalf("For(1m) with a cancel after 10ms = %v after %s", err, time.Since(start))
	}
	if err := For(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("For(0) on an ended context = %v", err)
	}
	if err := For(context.Background(), -time.Second); err != nil {
		t.Fatalf("For(-1s) = %v", err)
	}
}
