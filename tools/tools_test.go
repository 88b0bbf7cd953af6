package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

func setup(t *testing.T) (*tools.Tools, jetstream.JetStream) {
	t.Helper()
	_, _, topo := streamtest.Start(t)
	tl, err := tools.New(context.Background(), tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	return tl, topo.JS
}

func req(task, key, args string) worker.BodyRequest {
	return worker.BodyRequest{
		Session: "s-1", CallID: "c-" + key, Tool: tools.OrdersCreate, Arguments: json.RawMessage(args),
		Operation: worker.Operation{Task: task, Key: key, Contract: effect.Contract{Effect: effect.Idempotent, Revision: tools.OrdersRevision}},
	}
}

func TestOrdersCreateDeduplicates(t *testing.T) {
	ctx := context.Background()
	tl, _ := setup(t)
	body := tl.OrdersCreateTool().Body

	first, err := body(ctx, req("t-1", "op-1", `{"sku":"A-1","qty":2}`))
	if err != nil {
		t.Fatal(err)
	}
	// The same key with the same arguments, written differently: same answer.
	again, err := body(ctx, req("t-1", "op-1", `{"qty":2, "sku":"A-1"}`))
	if err != nil || string(again) != string(first) {
		t.Fatalf("repeat: %s, %v; want %s", again, err, first)
	}
	// The same key with other arguments is refused.
	if _, err := body(ctx, req("t-1", "op-1", `{"sku":"A-1","qty":3}`)); !errors.Is(err, tools.ErrKeyReused) {
		t.Fatalf("other arguments: %v, want ErrKeyReused", err)
	}
	// Another key, or the same key in another task, is another order.
	if _, err := body(ctx, req("t-1", "op-2", `{"sku":"A-1","qty":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := body(ctx, req("t-2", "op-1", `{"sku":"A-1","qty":2}`)); err != nil {
		t.Fatal(err)
	}
	orders, err := tl.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 3 {
		t.Fatalf("%d orders, want 3: %+v", len(orders), orders)
	}
}

func TestOrdersCreateFailAfterWrite(t *testing.T) {
	ctx := context.Background()
	tl, _ := setup(t)
	body := tl.OrdersCreateTool().Body
	tl.FailAfterWrite(1)
	if _, err := body(ctx, req("t-1", "op-1", `{"sku":"B-2","qty":1}`)); !errors.Is(err, tools.ErrSimulatedFailure) {
		t.Fatalf("first run: %v, want the simulated failure", err)
	}
	if orders, _ := tl.Orders(ctx); len(orders) != 1 {
		t.Fatalf("the failing run must have written its order: %+v", orders)
	}
	out, err := body(ctx, req("t-1", "op-1", `{"sku":"B-2","qty":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(out, &o); err != nil || o.OrderID == "" {
		t.Fatalf("output %s", out)
	}
	orders, _ := tl.Orders(ctx)
	if len(orders) != 1 || orders[0].OrderID != o.OrderID {
		t.Fatalf("orders %+v, want exactly %s", orders, o.OrderID)
	}
}

func TestPaymentsChargeIsNotIdempotent(t *testing.T) {
	ctx := context.Background()
	tl, _ := setup(t)
	tool := tl.PaymentsChargeTool()
	if tool.Metadata.Contract.Effect != effect.NonIdempotent {
		t.Fatalf("contract %v", tool.Metadata.Contract)
	}
	r := worker.BodyRequest{Session: "s-1", CallID: "c-1", Arguments: json.RawMessage(`{"account":"acc-1","amount_cents":500}`), Operation: worker.Operation{Task: "t-1", Key: "op-1"}}
	for range 2 {
		if _, err := tool.Body(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ledger, err := tl.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ledger) != 2 || ledger[0].AmountCents != 500 || ledger[1].Account != "acc-1" {
		t.Fatalf("ledger %+v, want two charges", ledger)
	}
}

func TestCatalogLookup(t *testing.T) {
	tl, _ := setup(t)
	tool := tl.CatalogLookupTool()
	tests := []struct {
		sku     string
		want    string
		wantErr error
	}{
		{"A-1", "Anchor bolt", nil},
		{"Z-9", "", tools.ErrUnknownSKU},
	}
	for _, tt := range tests {
		out, err := tool.Body(context.Background(), worker.BodyRequest{Arguments: json.RawMessage(`{"sku":"` + tt.sku + `"}`)})
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s: %v", tt.sku, err)
		}
		var it tools.Item
		_ = json.Unmarshal(out, &it)
		if it.Name != tt.want {
			t.Fatalf("%s: %s", tt.sku, out)
		}
	}
}

// TestNewIsIdempotent: a second New on the same server reuses the buckets
// and stream, and the tools register cleanly.
func TestNewIsIdempotent(t *testing.T) {
	tl, js := setup(t)
	tl2, err := tools.New(context.Background(), tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	reg := &worker.Registry{}
	if err := tl2.Register(reg); err != nil {
		t.Fatal(err)
	}
	if got := len(reg.Names()); got != 3 || len(tl.List()) != 3 {
		t.Fatalf("registered %v", reg.Names())
	}
	if _, err := tools.New(context.Background(), tools.Config{}); !errors.Is(err, tools.ErrInvalidConfig) {
		t.Fatalf("no JS: %v", err)
	}
}

// TestUnrepresentableArgumentsRejected: amounts and quantities the input
// schema allows but an int64 (or int) cannot hold are rejected at the
// arguments stage through the runtime: the body never starts, no ledger
// entry, and the call is not_started (retry_allowed), not an uncertain
// call that needs a review for nothing.
func TestUnrepresentableArgumentsRejected(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(tl.List()...)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().Fence(ctx, "s-args", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: "s-args", Log: lg, Registry: reg, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tool, args string }{
		{tools.PaymentsCharge, `{"account":"acct-1","amount_cents":9223372036854775808}`},
		{tools.PaymentsCharge, `{"account":"acct-1","amount_cents":1e400}`},
		{tools.PaymentsCharge, `{"account":"acct-1","amount_cents":100.0}`},
		{tools.OrdersCreate, `{"sku":"A-1","qty":2.0}`},
	} {
		res, err := rt.Call(ctx, tc.tool, json.RawMessage(tc.args))
		if res.Status != schema.StatusRejected || res.Stage != schema.StageArguments || !errors.Is(err, schema.ErrRejected) {
			t.Errorf("%s %s: %s/%s %v, want rejected at arguments", tc.tool, tc.args, res.Status, res.Stage, err)
		}
	}
	if ledger, err := tl.Ledger(ctx); err != nil || len(ledger) != 0 {
		t.Fatalf("ledger %+v %v, want no charge", ledger, err)
	}
	if res, err := rt.Call(ctx, tools.PaymentsCharge, json.RawMessage(`{"account":"acct-1","amount_cents":500}`)); err != nil || res.Status != schema.StatusOK {
		t.Fatalf("a valid charge: %v %v", res.Status, err)
	}
}
