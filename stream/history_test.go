package stream_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestLoadLeavesNoConsumer: every Load reads through an ordered consumer; a
// stream allows 1,000 consumers, so one left behind per load would make a
// busy recovery worker fail with "maximum consumers limit reached".
func TestLoadLeavesNoConsumer(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	log, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that Load reads past its first direct gets through a
	// consumer.
	const events = 20
	for i := 1; i < events; i++ {
		if _, err := log.Append(ctx, started(fmt.Sprintf("c-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	before := consumers(t, topo)
	for i := 0; i < 25; i++ {
		h, err := topo.Logs().Load(ctx, "s-1")
		if err != nil || len(h) != events {
			t.Fatalf("Load %d: %d events, %v", i, len(h), err)
		}
	}
	if after := consumers(t, topo); after != before {
		t.Fatalf("JW_EVENTS has %d consumers after 25 loads, %d before: loads leave consumers behind", after, before)
	}
}

// consumers returns how many consumers JW_EVENTS has now.
func consumers(t *testing.T, topo *stream.Topology) int {
	t.Helper()
	info, err := topo.Events.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

func TestCallsPerTask(t *testing.T) {
	call := func(id, task string) schema.Event {
		c := &schema.Call{CallID: id, Tool: "x"}
		if task != "" {
			c.Operation = &schema.Operation{Task: task, Key: "k-" + id}
		}
		return schema.Event{Type: schema.TypeCall, Call: c}
	}
	h := []schema.Event{
		{Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: 1}},
		call("c-1", "t-1"), started("c-1"), call("c-2", "t-1"), call("c-3", "t-2"),
		call("c-legacy", ""), // no operation: no task to count it in
	}
	got := stream.CallsPerTask(h)
	if len(got) != 2 || got["t-1"] != 2 || got["t-2"] != 1 {
		t.Fatalf("CallsPerTask = %v, want t-1:2 t-2:1", got)
	}
	if got := stream.CallsPerTask(nil); len(got) != 0 {
		t.Fatalf("CallsPerTask(nil) = %v", got)
	}
}
