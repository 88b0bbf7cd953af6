package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// Targets of plan issuance (issue 16: at least 0.6 of the raw operations).
var (
	issueTarget = Target{Check: RatioAtLeast, Limit: 0.6}
	dupTarget   = Target{Check: ValueEqual, Limit: 0}
)

// issuers is how many issuers race for every plan.
const issuers = 4

// maxLoadConsumers is how many consumers settle lets JW_EVENTS reach: under
// nats-server's default limit of 1,000 per stream, with room for the
// recovery workers' own.
const maxLoadConsumers = 900

func issueStep(cfg Config) step {
	// 4 × 200 prepares load 800 histories a round; see settle.
	calls := cfg.n(200, 60, 8)
	name := fmt.Sprintf("plan issuance, %d racing issuers", issuers)
	dupName := "plan issuance: duplicate plans published"
	return step{
		scenario: "issue", name: name, server: stream.SyncInterval, rows: []row{{name, issueTarget}, {dupName, dupTarget}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			jw, raw, dups, rawDups, err := e.issue(ctx, calls)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewResult(name, Median(jw), Median(raw), "plans/s", issueTarget),
				NewResult(dupName, float64(dups), float64(rawDups), "plans", dupTarget),
			}, nil
		},
	}
}

// issue measures, per round, plans/s of four recovery workers (each on its
// own connection) racing to issue the plans of the same calls through
// Recoverer.Prepare — load the history, recovery.PrepareRetry, KV create
// on the plan id, publish on jw.plans.<session> with the plan id as
// Nats-Msg-Id — against the raw operations the same work needs: four
// goroutines (each on its own connection) racing, per plan, a kv.Create
// of a plan-record-sized value on a bucket configured as jw_plans; the
// winner publishes a plan-sized message on a JW_PLANS session subject
// with the key as Nats-Msg-Id, each loser reads the winner's value with a
// KV get (as a racing issuer must, to return the stored plan). It also
// counts duplicates: plan messages beyond one per plan on JW_PLANS, and,
// raw, creates that succeeded beyond one per key plus messages beyond one
// per key (all must be 0).
func (e *env) issue(ctx context.Context, calls int) (jw, raw []float64, dups, rawDups int, err error) {
	topo, err := e.topology(ctx, e.prefix("pl"))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer e.drop(topo)
	// One topology handle per issuer, each on its own connection.
	topos := make([]*stream.Topology, issuers)
	for i := range topos {
		nc, err := e.srv.Connect()
		if err != nil {
			return nil, nil, 0, 0, err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		if topos[i], err = stream.OpenTopology(ctx, js, topo.Config()); err != nil {
			return nil, nil, 0, 0, err
		}
	}
	value, planMsg, err := samplePlanRecord()
	if err != nil {
		return nil, nil, 0, 0, err
	}

	jwRound := func(ctx context.Context, round int) (float64, error) {
		if err := settle(ctx, topo, issuers*calls); err != nil {
			return 0, err
		}
		sessions, err := uncertainCalls(ctx, topo, fmt.Sprintf("r%d", round), calls)
		if err != nil {
			return 0, err
		}
		recs := make([]*recoverer.Recoverer, issuers)
		for i := range recs {
			if recs[i], err = recoverer.New(recoverer.Config{Topology: topos[i], Name: fmt.Sprintf("issuer%d", i), DisableService: true, Logger: e.log, PlannerKey: e.planner}); err != nil {
				return 0, err
			}
		}
		before, err := topo.PlanLog.Info(ctx)
		if err != nil {
			return 0, err
		}
		ids := make([][]string, issuers)
		d, err := concurrently(ctx, issuers, func(ctx context.Context, i int) error {
			ids[i] = make([]string, len(sessions))
			for j, s := range sessions {
				p, err := recs[i].Prepare(ctx, s, "c-1")
				if err != nil {
					return fmt.Errorf("issuer %d: prepare %s: %w", i, s, err)
				}
				ids[i][j] = p.PlanID
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		for i := 1; i < issuers; i++ {
			for j := range sessions {
				if ids[i][j] != ids[0][j] {
					return 0, fmt.Errorf("issuers disagree on the plan of %s: %s vs %s", sessions[j], ids[0][j], ids[i][j])
				}
			}
		}
		after, err := topo.PlanLog.Info(ctx)
		if err != nil {
			return 0, err
		}
		dups += int(after.State.Msgs-before.State.Msgs) - len(sessions)
		return rate(len(sessions), d), nil
	}
	rawRound := func(ctx context.Context, round int) (float64, error) {
		// A bucket configured as jw_plans is (History 1, file storage,
		// the topology's replicas); the plan messages go to JW_PLANS
		// itself, on session subjects of their own.
		kvs := make([]jetstream.KeyValue, issuers)
		for i := range kvs {
			kv, err := topos[i].JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: topo.Prefix + "_raw", History: 1, Storage: jetstream.FileStorage, Replicas: topo.Config().Replicas})
			if err != nil {
				return 0, err
			}
			kvs[i] = kv
		}
		before, err := topo.PlanLog.Info(ctx)
		if err != nil {
			return 0, err
		}
		var won atomic.Int64
		d, err := concurrently(ctx, issuers, func(ctx context.Context, i int) error {
			for j := range calls {
				key := fmt.Sprintf("p-%d-%d", round, j)
				_, err := kvs[i].Create(ctx, key, value)
				switch {
				case err == nil:
					// The winner publishes the plan, its id as Msg-Id.
					won.Add(1)
					msg := nats.NewMsg(topo.PlansSubject(fmt.Sprintf("raw-%d-%d", round, j)))
					msg.Data = planMsg
					if _, err := topos[i].JS.PublishMsg(ctx, msg, jetstream.WithMsgID(key)); err != nil {
						return fmt.Errorf("raw publish: %w", err)
					}
				case errors.Is(err, jetstream.ErrKeyExists):
					// A loser reads the winner's record to learn the plan.
					if _, err := kvs[i].Get(ctx, key); err != nil {
						return fmt.Errorf("raw get: %w", err)
					}
				default:
					return fmt.Errorf("raw create: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		after, err := topo.PlanLog.Info(ctx)
		if err != nil {
			return 0, err
		}
		rawDups += int(won.Load()) - calls + int(after.State.Msgs-before.State.Msgs) - calls
		return rate(calls, d), nil
	}
	jw, raw, err = alternate(ctx, e.cfg.Rounds, jwRound, rawRound)
	return jw, raw, dups, rawDups, err
}

// settle waits until JW_EVENTS has room for loads more consumers.
// nats-server 2.15 allows 1,000 consumers per stream by default; history
// reads no longer create consumers (stream.Load and LoadForPlan use
// message and direct gets), so this is only a guard that a round starts
// with nothing of an earlier round's left on the stream.
func settle(ctx context.Context, topo *stream.Topology, loads int) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return waitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		info, err := topo.Events.Info(wctx)
		if err != nil {
			return false, err
		}
		return info.State.Consumers+loads <= maxLoadConsumers, nil
	})
}

// uncertainCalls writes n sessions <name>-<i>, each with one finished call
// c-1 of an idempotent tool that failed after it started: uncertain, and
// retry_allowed (basis uncertain_safe). It returns the session ids.
func uncertainCalls(ctx context.Context, topo *stream.Topology, name string, n int) ([]string, error) {
	contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s-%d", name, i)
		lg, err := topo.OpenLog(ctx, s, "bench-writer", 1)
		if err != nil {
			return nil, err
		}
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: fmt.Sprintf("op-%032d", i), Contract: contract}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "upstream 503"}},
		} {
			if _, err := lg.Append(ctx, ev); err != nil {
				return nil, err
			}
		}
		out[i] = s
	}
	return out, nil
}

// samplePlanRecord returns a jw_plans value and a JW_PLANS message of the
// sizes the recovery worker stores and publishes (a signed plan), for the
// raw side.
func samplePlanRecord() (record, msg []byte, err error) {
	plan := schema.Plan{
		V: schema.Version, PlanID: "p-" + strings.Repeat("0", 32), Session: "r0-0", Task: "t-1", Tool: "orders.create",
		Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), ArgsDigest: "sha256:" + strings.Repeat("0", 64),
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Key: "op-" + strings.Repeat("0", 32),
		PriorCallID: "c-1", PriorSeq: 1, Basis: schema.BasisUncertainSafe, IssuedAt: time.Now().UTC().Truncate(time.Second),
		Signer: "U" + strings.Repeat("A", 55), Sig: strings.Repeat("A", 86),
	}
	if record, err = json.Marshal(stream.PlanRecord{State: stream.PlanIssued, Plan: plan}); err != nil {
		return nil, nil, err
	}
	if msg, err = json.Marshal(plan); err != nil {
		return nil, nil, err
	}
	return record, msg, nil
}
