package tools

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// unansweredKV is a bucket whose first drop writes (Create and Update) are
// stored but never answered, and whose first dropGets reads are never
// answered: the caller waits until its context ends, as a request sent
// while the bucket's stream elects a leader does.
type unansweredKV struct {
	jetstream.KeyValue
	drop, dropGets atomic.Int32
}

func (kv *unansweredKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if kv.drop.Add(-1) >= 0 {
		if _, err := kv.KeyValue.Create(context.Background(), key, value, opts...); err != nil {
			return 0, err
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv *unansweredKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if kv.drop.Add(-1) >= 0 {
		if _, err := kv.KeyValue.Update(context.Background(), key, value, rev); err != nil {
			return 0, err
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return kv.KeyValue.Update(ctx, key, value, rev)
}

func (kv *unansweredKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if kv.dropGets.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return kv.KeyValue.Get(ctx, key)
}

// orders.create whose bucket requests go unanswered (stored or not), as
// in a leader election: each request is sent again after attemptTimeout,
// the body finishes well within its 10 s timeout (before the per-request
// bound it waited for that timeout and failed, the call left uncertain),
// and exactly one order is written with its dedupe record done.
func TestOrdersCreateSurvivesUnansweredRequests(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tl, err := New(ctx, Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	kv := &unansweredKV{KeyValue: tl.keys}
	kv.drop.Store(2)     // the create and the finishing update
	kv.dropGets.Store(1) // the read after the create's ErrKeyExists
	tl.keys = kv
	r := worker.BodyRequest{
		Session: "s-1", CallID: "c-1", Tool: OrdersCreate, Arguments: json.RawMessage(`{"sku":"A-1","qty":2}`),
		Operation: worker.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: OrdersRevision}},
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := tl.OrdersCreateTool().Body(bctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*attemptTimeout+time.Second {
		t.Fatalf("orders.create took %v: an unanswered request held it past its attempt timeout", took)
	}
	orders, err := tl.Orders(ctx)
	if err != nil || len(orders) != 1 {
		t.Fatalf("orders %+v %v: want exactly one", orders, err)
	}
	// The dedupe record is done: a repeat answers from it.
	again, err := tl.OrdersCreateTool().Body(ctx, r)
	if err != nil || string(again) != string(out) {
		t.Fatalf("repeat: %s %v, want %s", again, err, out)
	}
	e, err := tl.keys.Get(ctx, dedupeKey("t-1", "op-1"))
	if err != nil {
		t.Fatal(err)
	}
	var rec orderKey
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.State != "done" {
		t.Fatalf("dedupe record %s %v: want done", e.Value(), err)
	}
}

// retrying gives up on a failure that is not transient at once, and on
// the caller's context.
func TestRetryingStopsOnPermanentAndContext(t *testing.T) {
	calls := 0
	_, err := retrying(context.Background(), func(context.Context) (int, error) { calls++; return 0, jetstream.ErrKeyExists })
	if err != jetstream.ErrKeyExists || calls != 1 {
		t.Fatalf("%v after %d calls: want ErrKeyExists after 1", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = retrying(ctx, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %v: want the context's end", err, time.Since(start))
	}
}
