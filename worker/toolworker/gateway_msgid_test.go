package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestGatewayPublishesUnderContractMsgID: the request jw.api.call
// publishes carries the Nats-Msg-Id of the contract (protocol §12, computed
// here on its own): an agent publishing the same request itself is told it
// is a duplicate, so a call never runs twice for being sent both ways.
func TestGatewayPublishesUnderContractMsgID(t *testing.T) {
	topo := setup(t)
	g, err := toolworker.NewGateway(toolworker.GatewayConfig{Topology: topo, CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	q := schema.Request{V: 1, RequestID: "r-1", Session: "s-msgid", Task: worker.DefaultTask, Tool: "echo", Arguments: json.RawMessage(`{"b":2, "a":1}`)}
	// No tool worker runs: the call is published and left pending.
	if _, err := g.Call(context.Background(), q); !errors.Is(err, schema.ErrResultPending) {
		t.Fatalf("call without a worker: %v, want result_pending", err)
	}
	data, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(topo.Names().RequestsSubject(q.Session))
	msg.Data = data
	ack, err := topo.JS.PublishMsg(context.Background(), msg, jetstream.WithMsgID(contentMsgID(t, q)))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Fatalf("the same request under the contract's Msg-Id %q was stored again: the gateway published it under another", contentMsgID(t, q))
	}
}
