package stream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Example takes a session over from a writer that is still running: the new
// owner gets a lease with a higher epoch, fences the log and loads the
// confirmed history; the old writer is refused from then on.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "jingwei-example")
	defer os.RemoveAll(dir)
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Dir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		panic(err)
	}

	// The first writer.
	lease, _ := topo.Leases().AcquireLease(ctx, "s-1", "worker-a")
	old, _ := topo.Logs().Fence(ctx, "s-1", "worker-a", lease.Epoch)
	_, _ = old.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: []byte(`{}`)}})
	_ = lease.Release(ctx) // (or it expires)

	// The takeover.
	lease2, _ := topo.Leases().AcquireLease(ctx, "s-1", "recovery")
	if _, err := topo.Logs().Fence(ctx, "s-1", "recovery", lease2.Epoch); err != nil {
		panic(err)
	}
	history, _ := topo.Logs().Load(ctx, "s-1")
	for _, ev := range history {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%d %d %s %s", ev.Seq, ev.Epoch, ev.Type, ev.CallID())))
	}

	_, err = old.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}})
	fmt.Println("old writer fenced:", errors.Is(err, stream.ErrFenced))
	// Output:
	// 1 1 session.fenced
	// 2 1 tool.call c-1
	// 3 2 session.fenced
	// old writer fenced: true
}
