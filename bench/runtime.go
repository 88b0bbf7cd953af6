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
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
)

// The targets for runtime calls: against a raw call made of three
// fenced appends (the three-event form: tool.call, tool.started,
// tool.result), at least 1.3 times its rate; against a raw call of two
// (tool.call with started, tool.result: the least an admitted call can
// write), at least 0.9 of it.
var (
	runtimeTarget3 = Target{Check: RatioAtLeast, Limit: 1.3}
	runtimeTarget2 = Target{Check: RatioAtLeast, Limit: 0.9}
)

func runtimeStep(cfg Config, mode natsnode.SyncMode) step {
	calls := cfg.n(1500, 400, 20)
	if mode == natsnode.SyncAlways {
		calls = cfg.n(250, 60, 10)
	}
	name3 := fmt.Sprintf("runtime call, no-op tool, vs raw 3-append call (sync=%s)", mode)
	name2 := fmt.Sprintf("runtime call, no-op tool, vs raw 2-append call (sync=%s)", mode)
	return twoRatioStep("runtime", fmt.Sprintf("runtime call, no-op tool (sync=%s)", mode), mode, "calls/s", row{name3, runtimeTarget3}, row{name2, runtimeTarget2},
		func(ctx context.Context, e *env) (jw, raw3, raw2 []float64, err error) { return e.runtime(ctx, calls) })
}

// runtime measures, per round, calls/s of worker.Runtime.Call with a no-op
// tool against two raw "calls"/s, each on a session of its own: one raw
// call being three raw appends (tool.call, tool.started, tool.result of
// the same shapes as the runtime's events), the other two (tool.call with
// started set, tool.result), each append a publish with the
// expected-sequence header. The three sides run in every round, in an
// order that changes from round to round (each side first, second and
// third as often as the rounds allow).
func (e *env) runtime(ctx context.Context, calls int) (jw, raw3, raw2 []float64, err error) {
	topo, err := e.topology(ctx, e.prefix("rt"))
	if err != nil {
		return nil, nil, nil, err
	}
	defer e.drop(topo)
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(contract.Effect, contract.Revision),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		return nil, nil, nil, err
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)

	jwRound := runtimeRound(topo, reg, plans, budget, args, calls, "jw")
	id := "c-" + strings.Repeat("0", 32)
	// The three-event form's tool.call carries the start marker; the
	// combined form's (started) does not: it is its own start.
	call := func(started bool) schema.Event {
		return schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: args, StartMarker: !started, Started: started,
			Operation: &schema.Operation{Task: worker.DefaultTask, Key: "op-" + strings.Repeat("0", 32), Contract: contract}}}
	}
	result := schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}}
	rawRound := func(kind string, evs ...schema.Event) func(ctx context.Context, round int) (float64, error) {
		return func(ctx context.Context, round int) (float64, error) {
			session := fmt.Sprintf("%s-%d", kind, round)
			payloads := make([][]byte, len(evs))
			for i, ev := range evs {
				p, err := encodeFor(ev, session)
				if err != nil {
					return 0, err
				}
				payloads[i] = p
			}
			subj := topo.Names().EventsSubject(session)
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
	}
	started := schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}}
	rates, err := rotate(ctx, e.cfg.Rounds, jwRound, rawRound("raw3", call(false), started, result), rawRound("raw2", call(true), result))
	if err != nil {
		return nil, nil, nil, err
	}
	return rates[0], rates[1], rates[2], nil
}

// rotate is alternate for any number of sides: every round runs each
// side once, and it returns what each side measured per round. The order
// changes every round: the rotations of the sides as given (round 0 in
// that order), then the rotations of their reverse, and again; so within
// every run of len(sides) rounds each side is once first, once second, and
// so on.
func rotate(ctx context.Context, rounds int, sides ...func(ctx context.Context, round int) (float64, error)) ([][]float64, error) {
	n := len(sides)
	out := make([][]float64, n)
	for i := range rounds {
		for k := range n {
			s := (i + k) % n
			if (i/n)%2 == 1 {
				s = n - 1 - s
			}
			v, err := sides[s](ctx, i)
			if err != nil {
				return nil, err
			}
			out[s] = append(out[s], v)
		}
	}
	return out, nil
}

// runtimeRound is one round of the in-process runtime: calls no-op calls
// on a fresh session log (named <name>-<round>), as calls/s.
func runtimeRound(topo *stream.Topology, reg *worker.Registry, plans *stream.Plans, budget *stream.Budget, args json.RawMessage, calls int, name string) func(ctx context.Context, round int) (float64, error) {
	return func(ctx context.Context, round int) (float64, error) {
		lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("%s-%d", name, round), "bench", 1)
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
}
