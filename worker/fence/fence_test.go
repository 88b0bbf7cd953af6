package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

func tok(epoch uint64, call string) worker.Fence {
	return worker.Fence{Session: "s-1", Epoch: epoch, CallID: call, Task: "t", Key: "op-1"}
}

func ledger(t *testing.T) (*fence.Store, jetstream.JetStream) {
	t.Helper()
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	if _, err := topo.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}}); err != nil {
		t.Fatal(err)
	}
	s, err := fence.New(ctx, fence.Config{JS: topo.JS, Stream: "LEDGER"})
	if err != nil {
		t.Fatal(err)
	}
	return s, topo.JS
}

// The zombie writer: epoch 1 starts, a takeover fences the session, a
// reviewer raises the store's fence at the fence's epoch before checking,
// the retry (epoch 3) charges; the old writer's late charge is refused.
func TestLateWriteOfFencedWriterRefused(t *testing.T) {
	ctx := context.Background()
	s, _ := ledger(t)
	subj := "ledger.s-1"
	if _, err := s.Raise(ctx, subj, "s-1", 2); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Last(ctx, subj); r.Value || r.Epoch != 2 {
		t.Fatalf("after raise: %+v, want a marker at epoch 2", r)
	}
	if _, err := s.Write(ctx, subj, tok(3, "c-retry"), []byte("charge")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, subj, tok(1, "c-zombie"), []byte("charge")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("zombie write: %v, want ErrStale", err)
	}
	// Raising lower than the current fence changes nothing.
	if seq, err := s.Raise(ctx, subj, "s-1", 2); err != nil || seq != 0 {
		t.Fatalf("lower raise: %d %v", seq, err)
	}
	// Another session's epochs do not fence this one (not comparable).
	other := worker.Fence{Session: "s-2", Epoch: 1, CallID: "c-x"}
	if _, err := s.Write(ctx, subj, other, []byte("x")); err != nil {
		t.Fatalf("other session: %v", err)
	}
}

// Writers of eight epochs race on one resource: each read-then-publish is
// one compare-and-set, so a writer whose read went stale (a newer writer
// wrote between its read and its publish) is refused by the server, reads
// again and is then refused as stale: the highest epoch always ends last.
func TestCheckAndWriteAreAtomic(t *testing.T) {
	ctx := context.Background()
	s, _ := ledger(t)
	subj := "ledger.s-1"
	const writers = 8
	var wg sync.WaitGroup
	var ok, stale atomic.Int32
	for i := 1; i <= writers; i++ {
		wg.Add(1)
		go func(epoch uint64) {
			defer wg.Done()
			_, err := s.Write(ctx, subj, tok(epoch, fmt.Sprint("c-", epoch)), []byte("w"))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, fence.ErrStale):
				stale.Add(1)
			default:
				t.Errorf("epoch %d: %v", epoch, err)
			}
		}(uint64(i))
	}
	wg.Wait()
	if ok.Load()+stale.Load() != writers || ok.Load() == 0 {
		t.Fatalf("ok %d stale %d", ok.Load(), stale.Load())
	}
	r, err := s.Last(ctx, subj)
	if err != nil || r.Epoch != writers {
		t.Fatalf("last %+v %v: the highest epoch must win", r, err)
	}
}

func TestKVCreateAndRaiseKeepValue(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	kv, err := topo.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fence.ForKV(ctx, topo.JS, "orders")
	if err != nil {
		t.Fatal(err)
	}
	subj := fence.KeySubject("orders", "o-1")
	// A raise on an absent key leaves it absent to KV readers.
	if _, err := s.Raise(ctx, subj, "s-1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "o-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get after raise on absent key: %v", err)
	}
	if _, err := s.Create(ctx, subj, tok(1, "c-old"), []byte(`{"v":1}`)); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("old create: %v, want ErrStale", err)
	}
	if _, err := s.Create(ctx, subj, tok(3, "c-new"), []byte(`{"v":3}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, subj, tok(3, "c-new"), []byte(`{"v":4}`)); !errors.Is(err, fence.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if _, err := s.Raise(ctx, subj, "s-1", 5); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "o-1")
	if err != nil || string(e.Value()) != `{"v":3}` {
		t.Fatalf("value after raise: %v %v", e, err)
	}
	if _, err := s.Write(ctx, subj, tok(4, "c-4"), []byte(`{"v":9}`)); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("write below the raised fence: %v", err)
	}
}

// lostAcks is a JetStream whose first lose publishes are stored but
// answered with a timeout, as when an acknowledgement is lost in a leader
// change; the next fail publishes answer 503 without storing anything.
type lostAcks struct {
	jetstream.JetStream
	lose, fail atomic.Int32
}

func (j *lostAcks) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if j.fail.Add(-1) >= 0 {
		return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	}
	ack, err := j.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && j.lose.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return ack, err
}

// TestTransientFailuresWriteOnce: 503s and a lost acknowledgement are
// retried, and the write is stored exactly once.
func TestTransientFailuresWriteOnce(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	if _, err := topo.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}}); err != nil {
		t.Fatal(err)
	}
	js := &lostAcks{JetStream: topo.JS}
	js.fail.Store(2)
	js.lose.Store(1)
	s, err := fence.New(ctx, fence.Config{JS: js, Stream: "LEDGER"})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.Write(ctx, "ledger.s-1", tok(1, "c-1"), []byte("charge"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := topo.JS.Stream(ctx, "LEDGER")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 || info.State.LastSeq != seq {
		t.Fatalf("stream %+v %v: want exactly the one write at seq %d", info.State, err, seq)
	}
}

// dropped is a JetStream whose first drop publishes are stored but never
// answered: the caller waits until its context ends, as a request sent
// while the stream elects a new leader does (the server drops it).
type dropped struct {
	jetstream.JetStream
	drop atomic.Int32
}

func (j *dropped) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if j.drop.Add(-1) >= 0 {
		if _, err := j.JetStream.PublishMsg(context.Background(), m, opts...); err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return j.JetStream.PublishMsg(ctx, m, opts...)
}

// A publish the server never answers (a leader election) holds one
// attempt, not the whole write: the write is done one AttemptTimeout
// later, once, although its caller's context (a tool body's timeout) is
// much longer. Before AttemptTimeout the write waited for that context and
// failed with it (10 s here).
func TestUnansweredPublishRetriedWithinAttemptTimeout(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx := context.Background()
	if _, err := topo.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}}); err != nil {
		t.Fatal(err)
	}
	js := &dropped{JetStream: topo.JS}
	js.drop.Store(2)
	s, err := fence.New(ctx, fence.Config{JS: js, Stream: "LEDGER", AttemptTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	seq, err := s.Write(wctx, "ledger.s-1", tok(1, "c-1"), []byte("charge"))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("write took %v: an unanswered publish held it past its attempt timeout", took)
	}
	st, err := topo.JS.Stream(ctx, "LEDGER")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 || info.State.LastSeq != seq {
		t.Fatalf("stream %+v %v: want exactly the one write at seq %d", info.State, err, seq)
	}
}
