package stream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestLookupRetriedSoonAfterLeaderReturns: a lookup sent while a stream
// has no leader is never answered; once the leader is back (here after
// 2.5 s), the topology's lookup succeeds within one attempt's bound — not
// after jetstream's whole 5 s timeout.
func TestLookupRetriedSoonAfterLeaderReturns(t *testing.T) {
	start := time.Now()
	back := start.Add(2500 * time.Millisecond)
	var attempts atomic.Int32
	v, err := lookupRetrying(context.Background(), func(ctx context.Context) (int, error) {
		attempts.Add(1)
		if time.Now().Before(back) {
			<-ctx.Done() // nobody answers
			return 0, ctx.Err()
		}
		return 7, nil
	})
	took := time.Since(back)
	if err != nil || v != 7 {
		t.Fatalf("lookup: %d, %v", v, err)
	}
	if limit := lookupRetry.Attempt + lookupRetry.Max + 300*time.Millisecond; took > limit {
		t.Errorf("answered %s after the leader came back, want within %s", took.Round(time.Millisecond), limit)
	}
	if attempts.Load() < 2 {
		t.Errorf("%d attempts, want the first one given up and another sent", attempts.Load())
	}
}

// TestLookupNotRetriedForGood: a stream that does not exist, or a refusal,
// is returned at once; a transient failure that lasts is returned after
// lookupRetry.For, not retried forever; the caller's context ends it too.
func TestLookupNotRetriedForGood(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	_, err := lookupRetrying(context.Background(), func(context.Context) (int, error) {
		n.Add(1)
		return 0, jetstream.ErrStreamNotFound
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || n.Load() != 1 || time.Since(start) > time.Second {
		t.Errorf("not found: %v after %d attempts and %s, want it at once", err, n.Load(), time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = lookupRetrying(ctx, func(context.Context) (int, error) {
		return 0, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	})
	if err == nil || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("503 under a 700 ms context: %v after %s, want the error once the context ends", err, time.Since(start))
	}
}
