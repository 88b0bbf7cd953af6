package stream_test

import (
	"context"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestSmokeAppendLoad(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	lease, err := topo.AcquireLease(ctx, "s-1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := topo.Fence(ctx, "s-1", "w1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := log.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := topo.Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Seq != seq || evs[0].Type != schema.TypeFenced || evs[1].Epoch != lease.Epoch {
		t.Fatalf("got %+v", evs)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := topo.AcquireLease(ctx, "s-1", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Epoch <= lease.Epoch {
		t.Fatalf("epoch %d after %d", l2.Epoch, lease.Epoch)
	}
}
