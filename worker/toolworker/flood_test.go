package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestGatewayFloodLeavesOtherSessionsAlone: an agent floods jw.api.call
// on its own large session (a log of several MB: request ids already in
// it, which the gateway must find there, and new ones) while another
// session's agent makes its calls. The other session's median call
// latency under the flood stays within a generous factor of its median
// before, and no partition lease is lost. The gateway used to re-read the
// whole log for every pending call, on the worker's one connection: the
// worker was disconnected and its leases expired. (The flooders share the
// test machine's cores with the service, so their number is modest: what
// is measured is the gateway's work per call, not the CPU.)
func TestGatewayFloodLeavesOtherSessionsAlone(t *testing.T) {
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second, Partitions: 4}})
	noop := worker.Tool{Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "v1"),
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }}
	ctx := context.Background()

	// The flooder's session: 1,500 recorded calls with 4 KB arguments.
	const big, calm, old = "s-flood", "s-calm", 1500
	args := json.RawMessage(`{"blob":"` + strings.Repeat("x", 4000) + `"}`)
	lg, err := topo.Logs().OpenLog(ctx, big, "filler", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range old {
		id := fmt.Sprintf("c-%d", i)
		if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: args, RequestID: fmt.Sprintf("old-%d", i), Started: true,
			Operation: &schema.Operation{Task: worker.DefaultTask, Key: "k-" + id, Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "v1"}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK, Output: json.RawMessage(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}

	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, noop), CallTimeout: 20 * time.Second})
	cl := service.NewClient(nc, service.ClientConfig{Prefix: topo.Prefix, Timeout: 30 * time.Second})
	req := func(session, id string, a json.RawMessage) schema.Request {
		return schema.Request{V: 1, RequestID: id, Session: session, Task: worker.DefaultTask, Tool: "noop", Arguments: a}
	}
	streamtest.Eventually(t, 10*time.Second, "the worker owns every partition", func() bool { return len(r.w.OwnedPartitions()) == 4 })
	calmCalls := func(round string, n int) time.Duration {
		var ds []time.Duration
		for i := range n {
			t0 := time.Now()
			if _, err := cl.Call(ctx, req(calm, fmt.Sprintf("%s-%d", round, i), json.RawMessage(`{}`))); err != nil {
				t.Fatalf("calm call %s-%d: %v", round, i, err)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	calmCalls("warm", 3)
	before := calmCalls("before", 21)

	const flooders = 16
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var answered, busy atomic.Int64
	for g := range flooders {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("new-%d-%d", g, i)
				if i%2 == 0 {
					id = fmt.Sprintf("old-%d", (g*97+i)%old) // already in the log
				}
				_, err := cl.Call(ctx, req(big, id, args))
				switch {
				case err == nil:
					answered.Add(1)
				case errors.Is(err, schema.ErrBusy):
					busy.Add(1)
				default:
					t.Errorf("flood call %s: %v", id, err)
					return
				}
			}
		}()
	}
	streamtest.Eventually(t, 20*time.Second, "the flood under way", func() bool { return answered.Load() >= 2*flooders })
	under := calmCalls("under", 21)
	close(stop)
	flood.Wait()

	t.Logf("calm session's median call: %s before, %s under a flood of %d callers (%d answered, %d busy)", before, under, flooders, answered.Load(), busy.Load())
	if limit := floodFactor * max(before, time.Millisecond); under > limit {
		t.Errorf("the calm session's median call took %s under the flood, %s before: over %d times", under, before, floodFactor)
	}
	if st := r.w.Stats(); st.Lost != 0 {
		t.Errorf("%d partitions lost during the flood", st.Lost)
	}
}
