package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// runtimeTarget is issue 7's target for runtime calls.
var runtimeTarget = Target{Check: RatioAtLeast, Limit: 0.85}

func runtimeStep(cfg Config, mode stream.SyncMode) step {
	calls := cfg.n(1500, 400, 20)
	if mode == stream.SyncAlways {
		calls = cfg.n(250, 60, 10)
	}
	name := fmt.Sprintf("runtime call, no-op tool (sync=%s)", mode)
	return ratioStep("runtime", name, mode, "calls/s", runtimeTarget,
		func(ctx context.Context, e *env) ([]float64, []float64, error) {
			return e.runtime(ctx, calls)
		})
}

// runtime measures, per round, calls/s of worker.Runtime.Call with a no-op
// tool against raw "calls"/s, one raw call being three raw appends
// (tool.call, tool.started, tool.result of the same shapes as the
// runtime's events, each a publish with the expected-sequence header) on a
// session of its own.
func (e *env) runtime(ctx context.Context, calls int) (jw, raw []float64, err error) {
	topo, err := e.topology(ctx, e.prefix("rt"))
	if err != nil {
		return nil, nil, err
	}
	defer e.drop(topo)
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(contract.Effect, contract.Revision),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		return nil, nil, err
	}
	plans, budget := stream.NewPlans(topo.Plans), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)

	jwRound := func(ctx context.Context, round int) (float64, error) {
		lg, err := topo.OpenLog(ctx, fmt.Sprintf("jw-%d", round), "bench", 1)
		if err != nil {
			return 0, err
		}
		rt, err := worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: reg, Plans: plans, Budget: budget})
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for range calls {
			res, err := rt.Call(ctx, "noop", args)
			if err != nil {
				return 0, err
			}
			if res.Status != schema.StatusOK {
				return 0, fmt.Errorf("runtime call: status %q: %s", res.Status, res.Error)
			}
		}
		return rate(calls, time.Since(start)), nil
	}
	rawRound := func(ctx context.Context, round int) (float64, error) {
		session := fmt.Sprintf("raw-%d", round)
		id := "c-" + strings.Repeat("0", 32)
		evs := []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: args, StartMarker: true,
				Operation: &schema.Operation{Task: worker.DefaultTask, Key: "op-" + strings.Repeat("0", 32), Contract: contract}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}},
		}
		payloads := make([][]byte, len(evs))
		for i, ev := range evs {
			p, err := encodeFor(ev, session)
			if err != nil {
				return 0, err
			}
			payloads[i] = p
		}
		subj := topo.EventsSubject(session)
		var last uint64
		start := time.Now()
		for range calls {
			for _, p := range payloads {
				if last, err = rawAppend(ctx, topo.JS, subj, p, last); err != nil {
					return 0, err
				}
			}
		}
		return rate(calls, time.Since(start)), nil
	}
	return alternate(ctx, e.cfg.Rounds, jwRound, rawRound)
}
