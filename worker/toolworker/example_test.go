package toolworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// Example runs a tool worker with the example tools on an embedded server.
// An agent publishes a tool request on jw.requests.<session>; the worker
// takes the session, records the call and its result on the session log.
// The same request published again is not run again.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	topo := srv.Topology
	js := topo.JS
	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		panic(err)
	}
	reg, _ := worker.NewRegistry(tl.List()...)
	w, err := toolworker.New(toolworker.Config{Topology: topo, Registry: reg, Owner: "worker-1"})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// What an agent in any language publishes (twice, by mistake).
	req := []byte(`{"v":1,"request_id":"r-1","session":"s-1","task":"t-1","tool":"catalog.lookup","arguments":{"sku":"A-1"}}`)
	for range 2 {
		if _, err := js.Publish(ctx, topo.Names().RequestsSubject("s-1"), req); err != nil {
			panic(err)
		}
	}

	// Wait until the work queue is empty and the result is on the log.
	var result *schema.Result
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, _ := topo.Requests.Info(ctx)
		h, _ := topo.Logs().Load(ctx, "s-1")
		for _, ev := range h {
			if ev.Type == schema.TypeResult {
				result = ev.Result
			}
		}
		if result != nil && info != nil && info.State.Msgs == 0 {
			break
		}
	}
	h, _ := topo.Logs().Load(ctx, "s-1")
	for _, ev := range h {
		switch ev.Type {
		case schema.TypeFenced:
			fmt.Println(ev.Type, "by", ev.Fence.Owner)
		case schema.TypeCall:
			fmt.Println(ev.Type, ev.Call.Tool, "for request", ev.Call.RequestID)
		case schema.TypeStarted:
			fmt.Println(ev.Type)
		case schema.TypeResult:
			var item tools.Item
			_ = json.Unmarshal(ev.Result.Output, &item)
			fmt.Println(ev.Type, ev.Result.Status, item.Name)
		}
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// session.fenced by worker-1
	// tool.call catalog.lookup for request r-1
	// tool.started
	// tool.result ok Anchor bolt
	// stopped: <nil>
}
