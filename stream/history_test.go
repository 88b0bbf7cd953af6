package stream_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestLoadLeavesNoConsumer: every Load reads through an ordered consumer; a
// stream allows 1,000 consumers, so one left behind per load would make a
// busy recovery worker fail with "maximum consumers limit reached".
func TestLoadLeavesNoConsumer(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	log, err := topo.Fence(ctx, "s-1", "w1", 1)
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
		h, err := topo.Load(ctx, "s-1")
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
