package worker_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// TestPlanMustRetryItsPriorCall: a plan is "a single-use, signed
// permission to attempt one exact call again". A plan signed by a trusted
// planner key — what a client holding the recoverer's credentials and key
// can make and store as issued in jw_plans — that names as its prior call
// a call that is not in the session's log, or a real call with other
// arguments than it had, describes no call to attempt again: a new
// action with a side effect, under a key and a retry link that say
// otherwise. The runtime must refuse both before anything is consumed,
// recorded or run (the log would hold a retry that recovery calls
// corrupt_history only after the body ran).
func TestPlanMustRetryItsPriorCall(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	first, plan := l.failedOrder(t, rt, `{"sku":"A-1","qty":2}`)
	_ = first
	cases := []struct {
		name string
		mod  func(p *schema.Plan)
	}{
		{"prior call not in the log", func(p *schema.Plan) {
			p.PriorCallID, p.PriorSeq, p.Key = "c-never", 1, "op-made-up"
			p.PlanID = recovery.PlanID("s-1", "c-never")
		}},
		{"prior_seq not a tool.call", func(p *schema.Plan) {
			p.PriorCallID, p.PriorSeq, p.Key = "c-seq", 2, "op-made-up-2"
			p.PlanID = recovery.PlanID("s-1", "c-seq")
		}},
		{"other arguments than the prior call", func(p *schema.Plan) {
			p.Arguments = json.RawMessage(`{"qty":500,"sku":"A-1"}`)
			p.ArgsDigest, _ = schema.ArgsDigest(p.Arguments)
			p.PlanID = recovery.PlanID("s-1", p.PriorCallID) // the real call's plan id: issued instead of the real plan
		}},
	}
	// The real plan is not issued: its id is taken by the second case.
	if err := l.topo.PlanBucket.Purge(ctx, plan.PlanID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forged := plan
			forged.Signer, forged.Sig = "", ""
			tc.mod(&forged)
			forged = signed(t, forged)
			if _, err := l.plans.Issue(ctx, forged); err != nil {
				t.Fatal(err)
			}
			before := l.snap(t, "s-1", forged.PlanID)
			res, err := rt.CallWithOptions(ctx, forged.Tool, forged.Arguments, worker.CallOptions{Task: forged.Task, Retry: &forged})
			after := l.snap(t, "s-1", forged.PlanID)
			if schema.CodeOf(err) != schema.CodePlanMismatch || after.orders != before.orders || after.events != before.events || after.state != stream.PlanIssued {
				t.Errorf("HOLE: a signed plan for no prior attempt ran: call %s %s, err %v; orders %d → %d, events %d → %d",
					res.CallID, res.Status, err, before.orders, after.orders, before.events, after.events)
			}
		})
	}
}
