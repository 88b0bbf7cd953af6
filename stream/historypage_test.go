package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestReadLog: ReadLog passes the stored events of one session (never
// another's, interleaved on the stream) from a sequence on, stops when
// the reader has enough, and reports the leader's end either way.
func TestReadLog(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	a, err := topo.Logs().Fence(ctx, "a-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := topo.Logs().Fence(ctx, "b-1", "w2", 1)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := range 6 {
		s, err := a.Append(ctx, started(fmt.Sprintf("c-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
		if _, err := b.Append(ctx, started(fmt.Sprintf("c-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	h, err := topo.Logs().Load(ctx, "a-1")
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1].Seq
	var got []uint64
	end, err := topo.Logs().ReadLog(ctx, "a-1", seqs[1], func(seq uint64, data []byte) bool {
		got = append(got, seq)
		return len(got) < 3
	})
	if err != nil || end != last || fmt.Sprint(got) != fmt.Sprint(seqs[1:4]) {
		t.Fatalf("ReadLog from %d, 3 events: %v end %d (want %v end %d) %v", seqs[1], got, end, seqs[1:4], last, err)
	}
	got = nil
	end, err = topo.Logs().ReadLog(ctx, "a-1", 0, func(seq uint64, data []byte) bool { got = append(got, seq); return true })
	if err != nil || end != last || len(got) != len(h) {
		t.Fatalf("ReadLog whole: %v end %d, %v", got, end, err)
	}
	if end, err := topo.Logs().ReadLog(ctx, "a-1", last+1, func(uint64, []byte) bool { t.Fatal("called past the end"); return false }); err != nil || end != last {
		t.Fatalf("ReadLog past the end: %d %v", end, err)
	}
	if end, err := topo.Logs().ReadLog(ctx, "nobody", 0, func(uint64, []byte) bool { t.Fatal("called"); return false }); err != nil || end != 0 {
		t.Fatalf("ReadLog of an unknown session: %d %v", end, err)
	}
	if _, err := topo.Logs().ReadLog(ctx, "a.b", 0, func(uint64, []byte) bool { return true }); !errors.Is(err, stream.ErrInvalidSession) {
		t.Fatalf("ReadLog of an invalid session id: %v", err)
	}
}
