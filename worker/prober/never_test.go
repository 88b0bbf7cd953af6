package prober_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/prober"
)

// TestProbeNeverRunsWhereItMayNot: for a real uncertain call on the log,
// the prober leaves the call alone (ErrNotProbed) and never enters a
// probe's body when the call's tool names no probe, or when the probe it
// names is not declared read_only.
func TestProbeNeverRunsWhereItMayNot(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(charge, probe *worker.Tool)
	}{
		{"the tool names no probe", func(charge, _ *worker.Tool) { charge.Metadata.Probe = "" }},
		{"the probe is not read_only", func(_, probe *worker.Tool) {
			probe.Metadata = probe.Metadata.WithEffect(effect.Idempotent, tools.PaymentsLookupRevision)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			charge, probe := e.tl.PaymentsChargeTool(), e.tl.PaymentsLookupTool()
			var entered atomic.Int32
			body := probe.Body
			probe.Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
				entered.Add(1)
				return body(ctx, req)
			}
			tc.mod(&charge, &probe)
			reg, err := worker.NewRegistry(charge, probe)
			if err != nil {
				t.Fatal(err)
			}
			p, err := prober.New(prober.Config{Topology: e.topo, Key: e.proberKP, Tools: reg})
			if err != nil {
				t.Fatal(err)
			}
			callID, resume := e.frozenCharge(false)
			defer func() { _ = resume() }()
			a := schema.Assessment{Session: session, CallID: callID, Tool: tools.PaymentsCharge, Contract: charge.Metadata.Contract,
				Outcome: schema.OutcomeUncertain, Decision: schema.DecisionNeedsReview}
			rv, err := p.Probe(e.ctx, a)
			if !errors.Is(err, prober.ErrNotProbed) || rv != nil {
				t.Fatalf("Probe: review %+v, %v; want none and ErrNotProbed", rv, err)
			}
			if n := entered.Load(); n != 0 {
				t.Fatalf("the probe's body ran %d time(s)", n)
			}
		})
	}
}
