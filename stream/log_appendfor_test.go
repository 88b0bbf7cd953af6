package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestAppendForOutlivesItsCaller: AppendFor writes under a context that
// was cancelled before it was called (the caller went away), where Append
// refuses, and the event is on the log once, at the sequence returned.
func TestAppendForOutlivesItsCaller(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	l, err := topo.Logs().Fence(context.Background(), "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Append(gone, started("c-0")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append under a cancelled context: %v, want context.Canceled", err)
	}
	seq, err := l.AppendFor(gone, started("c-1"), 5*time.Second)
	if err != nil {
		t.Fatalf("AppendFor under a cancelled context: %v", err)
	}
	h, err := topo.Logs().Load(context.Background(), "s-1")
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Seq != seq || last.Started == nil || last.Started.CallID != "c-1" {
		t.Fatalf("AppendFor returned seq %d; the log ends with %+v", seq, last)
	}
	// A caller whose own deadline passed is gone too: AppendFor's bound
	// is d, not the caller's deadline.
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	seq2, err := l.AppendFor(expired, started("c-2"), 5*time.Second)
	if err != nil || seq2 <= seq {
		t.Fatalf("AppendFor under an expired deadline: seq %d, %v", seq2, err)
	}
	for _, ev := range h {
		if ev.Started != nil && ev.Started.CallID == "c-0" {
			t.Fatalf("the refused Append is on the log: %+v", ev)
		}
	}
}

// TestAppendForGivesUpAfterItsBound: with the server gone, AppendFor
// returns DeadlineExceeded once its bound has passed, not after a request
// timeout or the re-send bound, and the Log stays usable (no permanent
// error). A bound already passed gives up at once.
func TestAppendForGivesUpAfterItsBound(t *testing.T) {
	srv, _, topo := streamtest.Start(t)
	l, err := topo.Logs().Fence(context.Background(), "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	const bound = 300 * time.Millisecond
	start := time.Now()
	_, err = l.AppendFor(context.Background(), started("c-1"), bound)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AppendFor with the server gone: %v, want context.DeadlineExceeded", err)
	}
	if took < bound || took > bound+time.Second {
		t.Fatalf("AppendFor gave up after %v, want about %v", took, bound)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the Log stopped: %v", err)
	}
	start = time.Now()
	if _, err := l.AppendFor(context.Background(), started("c-2"), 0); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("AppendFor with no time left: %v after %v, want context.DeadlineExceeded at once", err, time.Since(start))
	}
}
