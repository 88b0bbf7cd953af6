package tools_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// Example runs orders.create twice for the same task and operation key, as a
// retry would: the second run finds the order the first one wrote.
func Example() {
	ctx := context.Background()
	srv, err := streamtest.New(streamtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	js := srv.Topology.JS

	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		panic(err)
	}
	create := tl.OrdersCreateTool()
	req := worker.BodyRequest{
		Session:   "s-1",
		Arguments: json.RawMessage(`{"sku":"A-1","qty":2}`),
		Operation: worker.Operation{Task: "t-1", Key: "op-7", Contract: create.Metadata.Contract},
	}
	first, _ := create.Body(ctx, req)
	second, _ := create.Body(ctx, req)
	orders, _ := tl.Orders(ctx)
	fmt.Println(create.Metadata.Contract)
	fmt.Println("same answer:", string(first) == string(second))
	fmt.Println("orders:", len(orders))
	// Output:
	// idempotent@orders-v1
	// same answer: true
	// orders: 1
}
