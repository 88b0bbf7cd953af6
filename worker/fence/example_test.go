package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// Example fences a ledger: the writer of epoch 1 is frozen, a reviewer
// raises the fence to the takeover's epoch 2 before checking, and the old
// writer's late charge is refused.
func Example() {
	ctx := context.Background()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	js := srv.Topology.JS
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}}); err != nil {
		panic(err)
	}
	ledger, err := fence.New(ctx, fence.Config{JS: js, Stream: "LEDGER"})
	if err != nil {
		panic(err)
	}
	old := worker.Fence{Session: "s-1", Epoch: 1, CallID: "c-1", Task: "t", Key: "op-1"}

	// The reviewer, before signing not_executed for c-1:
	if _, err := ledger.Raise(ctx, "ledger.s-1", "s-1", 2); err != nil {
		panic(err)
	}
	// The frozen writer wakes up:
	_, err = ledger.Write(ctx, "ledger.s-1", old, []byte(`{"charge":500}`))
	fmt.Println("late charge refused:", errors.Is(err, fence.ErrStale))
	// Output:
	// late charge refused: true
}
