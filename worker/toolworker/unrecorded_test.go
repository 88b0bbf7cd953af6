package toolworker_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// unrecorded runs one call of a non-idempotent tool on a worker whose
// connection for the session log goes through a proxy, while its leases
// are written on a direct connection (as a worker whose node is cut off
// from the stream's leader, or whose stream elects a leader, while its
// lease's bucket is reachable: the session stays held). The body runs,
// then the proxy holds everything until the tool.result's append has given
// up, and drops it: the result never reached the server. The worker
// reconnects. It returns the topology, the session, the worker and how
// many times the body ran.
func unrecorded(t *testing.T, rt worker.Config) (*stream.Topology, string, *running, *atomic.Int32) {
	t.Helper()
	srv, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	ctx := context.Background()
	px := streamtest.NewFreezeProxy(t, srv.ClientURL())
	nc1, err := nats.Connect(px.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc1.Close)
	js1, _ := jetstream.New(nc1)
	topo1, err := stream.OpenTopology(ctx, js1, topo.Config())
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	started, gate := make(chan struct{}, 4), make(chan struct{})
	tool := worker.Tool{
		Metadata: effect.Metadata{Name: "payments.charge"}.WithEffect(effect.NonIdempotent, "pay-v1"),
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			runs.Add(1)
			started <- struct{}{}
			<-gate
			return json.RawMessage(`{"charged":true}`), nil
		},
	}
	rt.WriteTimeout = 300 * time.Millisecond
	w := start(t, toolworker.Config{Topology: topo1, LeaseTopology: topo, Registry: registry(t, tool),
		PollInterval: 50 * time.Millisecond, DisableGateway: true, Runtime: rt})
	const session = "s-unrecorded"
	publish(t, topo, session, "r-1", "payments.charge", `{}`)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("body never started")
	}
	px.Freeze()
	close(gate)
	// The result's first append gives up after WriteTimeout (plus the
	// Log's last request); the lease is renewed meanwhile.
	time.Sleep(2 * time.Second)
	if !slices.Contains(w.w.Owned(), session) {
		t.Fatal("the worker lost the session while frozen: the lease connection should have kept it")
	}
	if n := results(t, topo, session); n != 0 {
		t.Fatalf("%d results on the log while the writer's connection was frozen", n)
	}
	px.Cut()
	return topo, session, w, &runs
}

// TestResultNotRecordedIsRecordedLater: a tool.result whose append failed
// while the session stayed held is appended again once the log is
// reachable: the call is closed by its true result, once, and the body
// ran once. (Before, the call stayed open for good: the worker kept the
// session, resumed it without a fence at the next request, and no
// recovery worker ever assessed the call.)
func TestResultNotRecordedIsRecordedLater(t *testing.T) {
	topo, session, _, runs := unrecorded(t, worker.Config{})
	streamtest.Eventually(t, 20*time.Second, "the call's result recorded", func() bool { return results(t, topo, session) > 0 })
	h := history(t, topo, session)
	if n := results(t, topo, session); n != 1 {
		t.Fatalf("%d tool.result events, want 1: %+v", n, h)
	}
	for _, ev := range h {
		if ev.Result != nil && (ev.Result.Status != schema.StatusOK || string(ev.Result.Output) != `{"charged":true}`) {
			t.Fatalf("recorded result %+v, want the body's", ev.Result)
		}
		if ev.Type == schema.TypeFenced && ev.Seq > 1 {
			t.Fatalf("session fenced again: %+v", ev)
		}
	}
	if len(recovery.OpenIn(h, 0)) != 0 || runs.Load() != 1 {
		t.Fatalf("open calls %v, body ran %d times", recovery.OpenIn(h, 0), runs.Load())
	}
}

// TestResultNeverRecordedIsFencedForAssessment: with no retry of the
// result (ResultRetryFor < 0), the worker does not leave its call open
// under a session it keeps: it fences the session above the call at once
// (no further request needed), which closes the call for a recovery
// worker to assess — and the session's next request runs after the fence.
func TestResultNeverRecordedIsFencedForAssessment(t *testing.T) {
	topo, session, w, runs := unrecorded(t, worker.Config{ResultRetryFor: -1})
	var call schema.Event
	for _, ev := range history(t, topo, session) {
		if ev.Type == schema.TypeCall {
			call = ev
		}
	}
	streamtest.Eventually(t, 20*time.Second, "the call closed by a fence", func() bool {
		return len(recovery.OpenIn(history(t, topo, session), 0)) == 0
	})
	var fence *schema.Event
	for _, ev := range history(t, topo, session) {
		if ev.Type == schema.TypeResult {
			t.Fatalf("a result was recorded with retries off: %+v", ev)
		}
		if ev.Type == schema.TypeFenced && ev.Seq > call.Seq {
			fence = &ev
		}
	}
	if fence == nil || fence.Fence.Owner != w.w.Owner() || fence.Fence.Epoch <= call.Epoch {
		t.Fatalf("fence after the call %+v, want one by %s above epoch %d", fence, w.w.Owner(), call.Epoch)
	}
	publish(t, topo, session, "r-2", "payments.charge", `{}`)
	streamtest.Eventually(t, 20*time.Second, "the next request runs", func() bool { return runs.Load() == 2 })
}
