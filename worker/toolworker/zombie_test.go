package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestFrozenWorkerWritesNothingAfterTakeover: a tool worker is frozen (all
// of its NATS traffic held, as SIGSTOP holds a process) while the body of a
// non-idempotent tool runs, past its 1 s leases. A second worker takes the
// partition and fences the session to run the next request; a reviewer,
// before signing not_executed, raises the business resource's fence at
// that epoch. Then the frozen worker is resumed and its body (which
// ignored its context: a frozen process cannot see it) writes through
// worker/fence: the business write is refused (fence.ErrStale), no event
// of the old epoch lands on the log after the fence (its tool.result is
// refused), the resumed worker gives the session up, and the next owner
// keeps running the session's requests; no call ran twice. (chaos covers
// SIGSTOP with processes; no package test froze a live toolworker.Worker.)
func TestFrozenWorkerWritesNothingAfterTakeover(t *testing.T) {
	srv, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	ctx := context.Background()
	if _, err := topo.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ledger"}); err != nil {
		t.Fatal(err)
	}
	const session, bucket, key = "s-z", "ledger", "acct-1"
	subj := fence.KeySubject(bucket, key)

	// The worker's own connection, through the proxy.
	px := streamtest.NewFreezeProxy(t, srv.ClientURL())
	nc1, err := nats.Connect(px.URL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc1.Close)
	js1, _ := jetstream.New(nc1)
	topo1, err := stream.OpenTopology(ctx, js1, stream.TopologyConfig{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store1, err := fence.ForKV(ctx, js1, bucket)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan worker.Fence, 4)
	gate := make(chan struct{})
	wrote := make(chan error, 4)
	var runs sync.Map
	tool := worker.Tool{
		Metadata: effect.Metadata{Name: "ledger.write"}.WithEffect(effect.NonIdempotent, "ledger-v1"),
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			n, _ := runs.LoadOrStore(req.CallID, 0)
			runs.Store(req.CallID, n.(int)+1)
			started <- req.Fence
			<-gate // frozen: the context's end is not seen
			wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := store1.Write(wctx, subj, req.Fence, []byte(`{"balance":-10}`))
			wrote <- err
			return json.RawMessage(`{"written":true}`), nil
		},
	}
	w1 := start(t, toolworker.Config{Topology: topo1, Registry: registry(t, tool), PollInterval: 50 * time.Millisecond, DisableGateway: true})

	publish(t, topo, session, "r-1", "ledger.write", `{}`)
	var tok worker.Fence
	select {
	case tok = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("body never started")
	}

	px.Freeze()
	// The next owner: a second worker takes the partition once the frozen
	// worker's lease expired, and fences the session to run r-2 there.
	p := newProbe()
	w2 := start(t, toolworker.Config{Topology: topo, Registry: registry(t, append(p.tools(), tool)...), PollInterval: 50 * time.Millisecond, DisableGateway: true})
	publish(t, topo, session, "r-2", "echo", `{"n":2}`)
	var fenceSeq, fenceEpoch uint64
	streamtest.Eventually(t, 30*time.Second, "the next owner fenced the session and ran r-2", func() bool {
		for _, ev := range history(t, topo, session) {
			if ev.Type == schema.TypeFenced && ev.Fence.Owner == w2.w.Owner() && fenceSeq == 0 {
				fenceSeq, fenceEpoch = ev.Seq, ev.Epoch
			}
		}
		return fenceSeq > 0 && len(p.ran(session)) == 1
	})
	if fenceEpoch <= tok.Epoch {
		t.Fatalf("fence epoch %d not above the frozen writer's %d", fenceEpoch, tok.Epoch)
	}
	// A reviewer about to sign not_executed for the frozen call raises the
	// resource's fence first.
	store, err := fence.ForKV(ctx, topo.JS, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Raise(ctx, subj, session, fenceEpoch); err != nil {
		t.Fatal(err)
	}

	// Resumed.
	px.Thaw()
	close(gate)
	select {
	case err := <-wrote:
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the resumed body's business write: %v, want fence.ErrStale", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed body's write never returned")
	}
	// The resumed worker lets the session go.
	streamtest.Eventually(t, 30*time.Second, "the resumed worker gave the session up", func() bool {
		return !slices.Contains(w1.w.Owned(), session)
	})
	// Whatever it still had in flight (its tool.result) is refused: a
	// request after that makes the owner's loop run again, and nothing of
	// the old epoch is on the log after the fence.
	publish(t, topo, session, "r-3", "echo", `{"n":3}`)
	streamtest.Eventually(t, 30*time.Second, "r-3 run by the next owner", func() bool { return len(p.ran(session)) == 2 })
	for _, ev := range history(t, topo, session) {
		if ev.Seq > fenceSeq && ev.Epoch < fenceEpoch {
			t.Fatalf("event of the frozen writer's epoch %d after the fence at %d: %+v", ev.Epoch, fenceSeq, ev)
		}
	}
	rec, err := store.Last(ctx, subj)
	if err != nil || rec.Value || rec.Epoch != fenceEpoch {
		t.Fatalf("the resource after the resumed write: %+v %v, want the raise at epoch %d", rec, err, fenceEpoch)
	}
	runs.Range(func(k, v any) bool {
		if v.(int) != 1 {
			t.Errorf("call %v ran %d times", k, v)
		}
		return true
	})
}
