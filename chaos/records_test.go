package chaos

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// TestReadSnapshot writes what a deployment writes — a fenced session log,
// an assessment with its id header, an order and a charge through the
// example tools' own stores, a review, a request left in the queue — for
// the run's sessions and for someone else's, and reads it back the way the
// harness does at the end of a run: only the run's own records, each with
// its owner, header and stored time.
func TestReadSnapshot(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := topo.JS
	if _, err := tools.New(ctx, tools.Config{JS: js}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"cxA-s1", "other-s1"} {
		lease, err := topo.Leases().AcquireLease(ctx, s, "w-"+s)
		if err != nil {
			t.Fatal(err)
		}
		log, err := topo.Logs().Fence(ctx, s, "w-"+s, lease.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		call := &schema.Call{CallID: "c-" + s, Tool: tools.PaymentsCharge, Arguments: json.RawMessage(`{}`), RequestID: "r-1", StartMarker: true,
			Operation: &schema.Operation{Task: task, Key: "op-1", Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: tools.PaymentsRevision}}}
		if _, err := log.Append(ctx, schema.Event{Type: schema.TypeCall, Call: call}); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(schema.Assessment{Session: s, CallID: call.CallID, Tool: call.Tool, Task: task, Key: "op-1", Contract: call.Operation.Contract,
			Outcome: schema.OutcomeUncertain, Evidence: "no_result", Decision: schema.DecisionNeedsReview, Attempts: 1, Chain: []string{call.CallID}})
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: topo.Names().AssessmentsSubject(s), Data: a, Header: nats.Header{headerAssessmentID: {"a." + s}}}); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(chargeRecord{Session: s, CallID: call.CallID, Account: s[:3] + "-a1", AmountCents: 5})
		if _, err := js.Publish(ctx, "tools.ledger", b); err != nil {
			t.Fatal(err)
		}
		rv, _ := json.Marshal(schema.Review{V: 1, Session: s, CallID: call.CallID, Operator: "o", Evidence: "e", Verdict: schema.VerdictCompleted})
		if _, err := js.Publish(ctx, topo.Names().ReviewsSubject(s), rv); err != nil {
			t.Fatal(err)
		}
		q, _ := json.Marshal(schema.Request{V: 1, RequestID: "r-2", Session: s, Task: task, Tool: tools.OrdersCreate, Arguments: json.RawMessage(`{}`)})
		if _, err := js.Publish(ctx, topo.Names().RequestsSubject(s), q); err != nil {
			t.Fatal(err)
		}
	}
	orders, err := js.KeyValue(ctx, "tools_orders")
	if err != nil {
		t.Fatal(err)
	}
	for key, customer := range map[string]string{"ord-1": "cxA-a1", "ord-2": "zzz-a2"} {
		b, _ := json.Marshal(orderRecord{OrderID: key, Task: task, Key: "op-" + key, Customer: customer})
		if _, err := orders.Create(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	// An order written, then overwritten: the last value counts.
	b, _ := json.Marshal(orderRecord{OrderID: "ord-1", Task: task, Key: "op-ord-1", Customer: "cxA-a1-again"})
	if _, err := orders.Put(ctx, "ord-1", b); err != nil {
		t.Fatal(err)
	}

	s, err := readSnapshot(ctx, js, "cxA", "cxA")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) != 2 || s.Events[0].Event.Type != schema.TypeFenced || s.Events[1].Owner != "w-cxA-s1" || s.Events[1].Event.Call == nil || s.Events[1].Seq == 0 || s.Events[1].Time.IsZero() {
		t.Errorf("events %+v", s.Events)
	}
	if len(s.Assessments) != 1 || s.Assessments[0].ID != "a.cxA-s1" || s.Assessments[0].Assessment.Session != "cxA-s1" {
		t.Errorf("assessments %+v", s.Assessments)
	}
	if len(s.Charges) != 1 || s.Charges[0].CallID != "c-cxA-s1" || s.Charges[0].Seq == 0 {
		t.Errorf("charges %+v", s.Charges)
	}
	if len(s.Orders) != 1 || s.Orders[0].Customer != "cxA-a1-again" {
		t.Errorf("orders %+v", s.Orders)
	}
	if len(s.Reviews) != 1 || s.PendingRequests != 1 || len(s.Undecodable) != 0 {
		t.Errorf("reviews %+v, pending %d, undecodable %v", s.Reviews, s.PendingRequests, s.Undecodable)
	}
	// The index sees the fence before the call: the call is not fenced
	// off by it (same epoch).
	x := newIndex(s)
	if ci := x.calls[callKey{"cxA-s1", "c-cxA-s1"}]; ci == nil || ci.Final() {
		t.Errorf("call %+v: want open, not final", ci)
	}
}

// TestLedgerFenceRead: the ledger as the fenced example tools write it —
// charges on tools.ledger.<session> with their writer's epoch, a
// reviewer's raised fence (a marker, not a charge) — and one charge a
// broken tool wrote past the fence: the reader counts two charges, no
// undecodable message, and the fence row finds the one below the fence.
func TestLedgerFenceRead(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := topo.JS
	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	charge := tl.PaymentsChargeTool().Body
	req := func(call string, epoch uint64) worker.BodyRequest {
		return worker.BodyRequest{Session: "cxA-s1", CallID: call, Arguments: json.RawMessage(`{"account":"cxA-a1","amount_cents":5}`),
			Fence: worker.Fence{Session: "cxA-s1", Epoch: epoch, CallID: call}}
	}
	if _, err := charge(ctx, req("c-3", 3)); err != nil {
		t.Fatal(err)
	}
	if err := tl.FenceLedger(ctx, "cxA-s1", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := charge(ctx, req("c-zombie", 4)); err == nil {
		t.Fatal("a charge below the raised fence was accepted")
	}
	// A tool that ignores the fence writes anyway.
	b, _ := json.Marshal(chargeRecord{Session: "cxA-s1", CallID: "c-broken", Account: "cxA-a1", AmountCents: 5})
	m := nats.NewMsg(tl.LedgerSubject("cxA-s1"))
	m.Data, m.Header = b, nats.Header{fence.HeaderSession: {"cxA-s1"}, fence.HeaderEpoch: {"2"}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	s, err := readSnapshot(ctx, js, "cxA", "cxA")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Charges) != 2 || s.Undecodable[streamLedger] != 0 {
		t.Fatalf("charges %+v, undecodable %v: want c-3 and c-broken, no undecodable marker", s.Charges, s.Undecodable)
	}
	r := belowFence(newIndex(s))
	if r.Value != 1 || r.Met || !r.Must || len(r.Examples) != 1 || !strings.Contains(r.Examples[0], "c-broken") {
		t.Fatalf("below-fence row %+v, want c-broken", r)
	}
}
