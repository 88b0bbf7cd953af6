package demo

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

func TestParseHolds(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]HoldPoint
		wantErr bool
	}{
		{"", map[string]HoldPoint{}, false},
		{"orders.create=after", map[string]HoldPoint{"orders.create": HoldAfter}, false},
		{" a=before , b=after ,", map[string]HoldPoint{"a": HoldBefore, "b": HoldAfter}, false},
		{"a", nil, true},
		{"a=sometimes", nil, true},
		{"a=", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseHolds(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("ParseHolds(%q): %v, want error %t", tt.in, err, tt.wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("ParseHolds(%q): %v does not match ErrInvalidConfig", tt.in, err)
			}
			continue
		}
		if len(got) != len(tt.want) {
			t.Fatalf("ParseHolds(%q) = %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Fatalf("ParseHolds(%q) = %v, want %v", tt.in, got, tt.want)
			}
		}
		if back, _ := ParseHolds(FormatHolds(got)); len(back) != len(got) {
			t.Fatalf("FormatHolds(%v) does not parse back", got)
		}
	}
}

// TestHoldTools runs the held bodies of the example tools on an embedded
// server: "after" writes the business record and then waits for its
// context; "before" waits without writing anything; tools not held run as
// they are.
func TestHoldTools(t *testing.T) {
	ctx := context.Background()
	_, _, topo := streamtest.Start(t)
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]worker.Tool{}
	for _, x := range HoldTools(tl, map[string]HoldPoint{tools.OrdersCreate: HoldAfter, tools.PaymentsCharge: HoldBefore}) {
		held[x.Metadata.Name] = x
	}
	run := func(name, args string) (json.RawMessage, error) {
		x := held[name]
		bctx, cancel := context.WithCancel(ctx)
		type res struct {
			out json.RawMessage
			err error
		}
		done := make(chan res, 1)
		go func() {
			out, err := x.Body(bctx, worker.BodyRequest{Session: "s-1", CallID: "c-" + name, Tool: name, Arguments: json.RawMessage(args),
				Operation: worker.Operation{Task: "t-1", Key: "op-" + name, Contract: x.Metadata.Contract}})
			done <- res{out, err}
		}()
		if name != tools.CatalogLookup {
			// A held body does not return while its context lives: wait
			// for its effect (or a while, for "before"), then cancel.
			deadline := time.Now().Add(5 * time.Second)
			for name == tools.OrdersCreate && time.Now().Before(deadline) {
				if os, _ := tl.Orders(ctx); len(os) == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond) // poll the business record
			}
			select {
			case r := <-done:
				t.Fatalf("%s returned while held: %s %v", name, r.out, r.err)
			default:
			}
		}
		cancel()
		r := <-done
		return r.out, r.err
	}

	if _, err := run(tools.OrdersCreate, `{"sku":"A-1","qty":1}`); !errors.Is(err, context.Canceled) {
		t.Fatalf("held orders.create: %v, want context.Canceled", err)
	}
	if os, _ := tl.Orders(ctx); len(os) != 1 {
		t.Fatalf("orders after a body held after its effect: %d, want 1", len(os))
	}
	if _, err := run(tools.PaymentsCharge, `{"account":"a","amount_cents":1}`); !errors.Is(err, context.Canceled) {
		t.Fatalf("held payments.charge: %v, want context.Canceled", err)
	}
	if l, _ := tl.Ledger(ctx); len(l) != 0 {
		t.Fatalf("ledger after a body held before its effect: %d entries, want 0", len(l))
	}
	if held[tools.OrdersCreate].Timeout != heldTimeout || held[tools.CatalogLookup].Timeout == heldTimeout {
		t.Fatal("held tools must outlive the demo's steps; others keep their timeout")
	}
	out, err := run(tools.CatalogLookup, `{"sku":"A-1"}`)
	if err != nil || len(out) == 0 {
		t.Fatalf("catalog.lookup (not held): %s %v", out, err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg     Config
		wantErr bool
	}{
		{Config{}, false},
		{Config{PaymentHold: HoldBefore}, false},
		{Config{PaymentHold: "never"}, true},
		{Config{LeaseTTL: 500 * time.Millisecond}, true},
	}
	for _, tt := range tests {
		err := tt.cfg.WithDefaults().validate()
		if (err != nil) != tt.wantErr || err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want error %t", tt.cfg, err, tt.wantErr)
		}
	}
	if c := (Config{}).WithDefaults(); c.PaymentHold != HoldAfter || c.LeaseTTL != 2*time.Second || c.Out == nil {
		t.Errorf("defaults: %+v", c)
	}
}
