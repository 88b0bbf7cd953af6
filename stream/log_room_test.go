package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func callEvent(id string) schema.Event {
	return schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "t", Arguments: json.RawMessage(`{}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-" + id, Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "v1"}}}}
}

func resultEvent(id string, output int) schema.Event {
	return schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK,
		Output: json.RawMessage(`"` + strings.Repeat("o", output) + `"`)}}
}

// TestLogKeepsRoomForStartedCalls: a tool.call keeps room for its start
// and its result (WithCallRoom); another writer's events — a second call,
// anything else — cannot eat into it, whatever their size, while the
// started call's own start and result (up to its bound) always fit. Its
// result gives the room back.
func TestLogKeepsRoomForStartedCalls(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Limits: schema.Limits{MaxBytes: 64 << 10}}})
	l, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, before := l.Room()
	const bound = 24 << 10
	if _, err := l.Append(stream.WithCallRoom(ctx, bound), callEvent("c-1")); err != nil {
		t.Fatal(err)
	}
	_, after := l.Room()
	if kept := before - after; kept < bound {
		t.Fatalf("a call keeps %d bytes, want at least its result's %d", kept, bound)
	}
	// A second call with the same bound does not fit beside the first.
	if _, err := l.Append(stream.WithCallRoom(ctx, bound), callEvent("c-2")); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("a second call eating into the first's room: %v", err)
	}
	// Nor does any other event that would take the room kept.
	if _, err := l.Append(ctx, resultEvent("c-other", int(after))); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("an event taking the room kept: %v", err)
	}
	// Without a bound, a call keeps room for the largest event: none fits here.
	if _, err := l.Append(ctx, callEvent("c-3")); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("a call without a bound in a 64 KiB log: %v", err)
	}
	// The started call's own events fit, up to its bound.
	if _, err := l.Append(ctx, started("c-1")); err != nil {
		t.Fatalf("the call's start: %v", err)
	}
	if _, err := l.Append(ctx, resultEvent("c-1", bound-4096)); err != nil {
		t.Fatalf("the call's result: %v", err)
	}
	// Its result gave the room back: the next call fits.
	if _, err := l.Append(stream.WithCallRoom(ctx, 4096), callEvent("c-4")); err != nil {
		t.Fatalf("a call after the first's result: %v", err)
	}
}

// TestTakeoverKeepsRoomForCallsAwaitingApproval: a call parked for
// approval is resumed by whoever confirms the session next, so the new
// writer's Log keeps room for its approval, start and result (the
// largest event: it does not know the tool), and gives it back at its
// result. A call open without an approval request keeps nothing.
func TestTakeoverKeepsRoomForCallsAwaitingApproval(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	l1, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []schema.Event{
		callEvent("c-parked"),
		{Type: schema.TypeApprovalRequested, ApprovalRequest: &schema.ApprovalRequest{CallID: "c-parked", Deadline: time.Now().Add(time.Hour).UTC()}},
		callEvent("c-open"),
	} {
		if _, err := l1.Append(stream.WithCallRoom(ctx, 1024), ev); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := topo.Logs().Fence(ctx, "s-1", "w2", 2)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := topo.Logs().OpenLog(ctx, "s-1", "w3", 3) // measures, loads no history: keeps nothing
	if err != nil {
		t.Fatal(err)
	}
	_, kept := l2.Room()
	_, all := plain.Room()
	if all-kept < 1<<20 || all-kept > 2<<20 {
		t.Fatalf("the new writer keeps %d bytes for one call awaiting approval, want room for one largest event", all-kept)
	}
	if _, err := l2.Append(ctx, resultEvent("c-parked", 10)); err != nil {
		t.Fatal(err)
	}
	if _, after := l2.Room(); after < all-4096 {
		t.Fatalf("room %d after the parked call's result, want it back (about %d)", after, all)
	}
}
