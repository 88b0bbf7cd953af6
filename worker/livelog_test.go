package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
)

// liveRuntime returns a runtime with tool on a fresh session log of an
// embedded server (a *stream.Log, whose appends the runtime bounds with
// AppendFor), and the server.
func liveRuntime(t *testing.T, tool worker.Tool, mod func(*worker.Config)) (*worker.Runtime, *natsnode.Embedded, *stream.Topology) {
	t.Helper()
	srv, _, topo := streamtest.Start(t)
	if tool.Metadata.Name == "" {
		tool.Metadata = effect.Metadata{Name: "probe"}.WithEffect(effect.ReadOnly, "probe-v1")
	}
	reg, err := worker.NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().OpenLog(context.Background(), "s-live", "host", 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Session: "s-live", Log: lg, Registry: reg, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)}
	if mod != nil {
		mod(&cfg)
	}
	rt, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt, srv, topo
}

// TestLiveLogResultOutlivesCaller: on a real session log, a caller that
// goes away while the body runs still gets its call's tool.result
// (cancelled) written after the body's start, and the body got its fence
// token and saw the cancellation.
func TestLiveLogResultOutlivesCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var token worker.Fence
	// The runtime does not wait for a body that is being cancelled (it
	// records the cancellation at once): the body says it saw it here.
	sawCancel := make(chan struct{}, 2)
	rt, _, topo := liveRuntime(t, worker.Tool{Body: func(bctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
		token, _ = worker.FencingToken(bctx)
		cancel() // the caller goes away while the body runs
		select {
		case <-bctx.Done():
			sawCancel <- struct{}{}
			return nil, bctx.Err()
		case <-time.After(10 * time.Second):
			return nil, errors.New("no cancellation reached the body")
		}
	}}, nil)
	res, err := rt.Call(ctx, "probe", json.RawMessage(`{}`))
	if res.Status != schema.StatusCancelled || schema.CodeOf(err) != schema.Code(schema.StatusCancelled) {
		t.Fatalf("call: %+v %v, want cancelled", res, err)
	}
	select {
	case <-sawCancel:
	case <-time.After(10 * time.Second):
		t.Fatal("the body never saw the cancellation")
	}
	if token.CallID != res.CallID || token.Epoch != 1 || token.Session != "s-live" {
		t.Fatalf("body: token %+v (call %s)", token, res.CallID)
	}
	h, err := topo.Logs().Load(context.Background(), "s-live")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range h {
		types = append(types, ev.Type)
	}
	// The first call of a task is counted before its admission (three-event form).
	if len(h) != 3 || h[0].Call == nil || h[1].Started == nil || h[2].Result == nil || h[2].Result.Status != schema.StatusCancelled || h[2].Result.CallID != res.CallID {
		t.Fatalf("history %v: %+v", types, h)
	}
	// The next call of the task is in the combined form; its caller is
	// gone before its result too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel = cancel2
	res2, _ := rt.Call(ctx2, "probe", json.RawMessage(`{}`))
	h, err = topo.Logs().Load(context.Background(), "s-live")
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; res2.Status != schema.StatusCancelled || len(h) != 5 || !h[3].Call.Started || last.Result == nil || last.Result.CallID != res2.CallID || last.Result.Status != schema.StatusCancelled {
		t.Fatalf("combined form: %+v; history %+v", res2, h[3:])
	}
}

// TestLiveLogResultBoundedByWriteTimeout: with the server gone while the
// body runs, the tool.result append is tried, each time for WriteTimeout
// (not the log's 15 s re-send bound), for ResultRetryFor, then gives up
// with log_unavailable, and the runtime is not fenced by it.
func TestLiveLogResultBoundedByWriteTimeout(t *testing.T) {
	const wt, retryFor = 300 * time.Millisecond, time.Second
	stop := make(chan func(), 1)
	rt, srv, _ := liveRuntime(t, worker.Tool{Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		(<-stop)()
		return nil, nil
	}}, func(c *worker.Config) { c.WriteTimeout, c.ResultRetryFor = wt, retryFor })
	stop <- srv.Shutdown
	start := time.Now()
	_, err := rt.Call(context.Background(), "probe", json.RawMessage(`{}`))
	took := time.Since(start)
	if schema.CodeOf(err) != schema.CodeLog || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with the server gone: %v, want log_unavailable (deadline exceeded)", err)
	}
	if took < retryFor || took > retryFor+wt+2*time.Second {
		t.Fatalf("call returned after %v, want about ResultRetryFor (%v) plus a WriteTimeout (%v)", took, retryFor, wt)
	}
	if _, err := rt.Call(context.Background(), "probe", json.RawMessage(`{}`)); schema.CodeOf(err) == schema.CodeFenced {
		t.Fatalf("a write timeout fenced the runtime: %v", err)
	}
}
