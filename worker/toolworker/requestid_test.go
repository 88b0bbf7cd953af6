package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestSameRequestIDInTwoSessions: request ids are the agent's ids for its
// intents, checked per session — a request whose id is already on the
// session's log is not run again (§12), jw.api.call finds its result on
// the session's log and its refusal under (session, request id). Two
// agents, each with its own session, both number their requests from r-1.
// Each must get its own call run and its own result. jw.api.call publishes
// with Nats-Msg-Id = request_id, and JW_REQUESTS deduplicates Msg-Ids
// across the whole stream for 2 minutes: the second session's r-1 is taken
// for a duplicate of the first's and dropped — never a call, never an
// answer — and its caller waits the full call timeout for result_pending.
func TestSameRequestIDInTwoSessions(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond, CallTimeout: 10 * time.Second})
	cl := service.NewClient(topo.JS.Conn(), service.ClientConfig{Prefix: topo.Prefix, Timeout: 30 * time.Second})
	ctx := context.Background()
	for i, session := range []string{"s-agent-a", "s-agent-b"} {
		q := schema.Request{V: 1, RequestID: "r-1", Session: session, Task: worker.DefaultTask, Tool: "echo", Arguments: json.RawMessage(`{"n":1}`)}
		var ev schema.Event
		var err error
		streamtest.Eventually(t, 30*time.Second, "the gateway serves", func() bool {
			ev, err = cl.Call(ctx, q)
			return !errors.Is(err, service.ErrNoService)
		})
		if err != nil || ev.Result == nil || ev.Result.Status != schema.StatusOK {
			t.Fatalf("agent %d (%s) call r-1: %+v %v; runs per session: a=%v b=%v", i, session, ev, err, p.ran("s-agent-a"), p.ran("s-agent-b"))
		}
	}
}
