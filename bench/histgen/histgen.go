// Package histgen generates the synthetic session histories `jingwei bench`
// measures Inspect against (the "Inspect vs decode" row); the tests of
// schema, recovery and the recovery worker use the same histories as a
// realistic workload. It is a workload generator, not a fixture set: it
// ships in the binary because the bench command needs it. It builds
// realistic, valid histories: tool calls with operations and start markers, started
// events, calls in the combined form (call.started, every second call
// whose body starts), results of every status, rejected admissions, retries linked to
// their prior attempt (with plan ids, bases and reviews), takeovers
// (session.fenced), events of a type recovery does not know
// ("tool.progress", carried through and ignored) and possibly an open call
// at the end. It is deterministic for a given Config.
//
// Sizes: the default 100,000-event history is about 15.9 MB of JSON Lines,
// within the 16 MiB limit. Calls, started and result events alone average
// about 180 bytes, so a 100,000-event history of nothing else would exceed
// the limit; the small progress events keep it realistic and loadable.
package histgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// Config describes a history to generate. The zero value is a 100,000-event
// history of session "s-1" with seed 1.
type Config struct {
	// Session is the session id. Defaults to "s-1".
	Session string
	// Events is the exact number of events. Defaults to 100,000
	// (schema.MaxHistoryEvents).
	Events int
	// Seed seeds the generator. Defaults to 1.
	Seed uint64
}

func (c Config) withDefaults() Config {
	if c.Session == "" {
		c.Session = "s-1"
	}
	if c.Events <= 0 {
		c.Events = schema.MaxHistoryEvents
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// History is a generated history.
type History struct {
	// Events are the events in log order, seq 1..n.
	Events []schema.Event
	// JSONL is the history as JSON Lines, exactly as schema.WriteHistory
	// writes it.
	JSONL []byte
	// Calls lists every call id in log order.
	Calls []string
	// LastCall is the call id of the last tool.call event (the open call
	// when the history ends before its result).
	LastCall string
}

type tool struct {
	name     string
	contract effect.Contract
}

var tools = []tool{
	{"orders.create", effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}},
	{"search.query", effect.Contract{Effect: effect.ReadOnly, Revision: "search-v3"}},
	{"payments.charge", effect.Contract{Effect: effect.NonIdempotent, Revision: "pay-v2"}},
	{"notify.send", effect.Contract{Effect: effect.Unknown, Revision: "notify-v1"}},
}

var stages = []schema.Stage{schema.StagePermission, schema.StageArguments, schema.StageGuard, schema.StageApproval, schema.StageBudget}

var uncertain = []schema.Status{schema.StatusFailed, schema.StatusTimeout, schema.StatusCancelled, schema.StatusBudgetExhausted, schema.StatusOutputLimit}

// Generate builds the history described by cfg. It panics if the generated
// events do not encode, which would be a bug in the generator or in schema.
func Generate(cfg Config) History {
	cfg = cfg.withDefaults()
	g := &gen{cfg: cfg, r: rand.New(rand.NewPCG(cfg.Seed, 0x6a77)), epoch: 1,
		at: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	for action := 1; len(g.h.Events) < cfg.Events; action++ {
		g.action(action)
		if action%1000 == 0 {
			g.epoch++
			g.add(schema.Event{Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: g.epoch, Owner: fmt.Sprintf("worker-%d", g.epoch)}})
		}
	}
	g.h.Events = g.h.Events[:cfg.Events]
	g.h.Calls = g.h.Calls[:0]
	for _, ev := range g.h.Events {
		if ev.Call != nil {
			g.h.Calls = append(g.h.Calls, ev.Call.CallID)
			g.h.LastCall = ev.Call.CallID
		}
	}
	var buf bytes.Buffer
	if err := schema.WriteHistory(&buf, g.h.Events); err != nil {
		panic("histgen: " + err.Error())
	}
	g.h.JSONL = buf.Bytes()
	return g.h
}

type gen struct {
	cfg   Config
	r     *rand.Rand
	h     History
	epoch uint64
	calls int
	at    time.Time
}

func (g *gen) add(ev schema.Event) uint64 {
	g.at = g.at.Add(time.Duration(g.r.IntN(3)) * time.Second)
	ev.V = schema.Version
	ev.Seq = uint64(len(g.h.Events) + 1)
	ev.Session = g.cfg.Session
	ev.Epoch = g.epoch
	ev.At = g.at
	g.h.Events = append(g.h.Events, ev)
	return ev.Seq
}

// started records the start of call c: a tool.started, or, for a call
// in the combined form (every second call), its call.started (no
// tool.started, no start marker); then 0 to 6 progress events.
func (g *gen) started(c *schema.Call) {
	if g.combined() {
		c.StartMarker, c.Started = false, true
	} else {
		g.add(schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: c.CallID}})
	}
	for range g.r.IntN(7) {
		g.add(schema.Event{Type: "tool.progress"})
	}
}

// combined reports whether a call whose body starts is recorded in the
// combined form (docs/protocol.md §5): every call with an even number, so
// both forms, and retry chains mixing them, are in every history. A
// refused call keeps its start marker either way, as the runtime writes it.
func (g *gen) combined() bool { return g.calls%2 == 0 }

// action records one logical action: a first attempt and, when it did not
// complete, up to two retries.
func (g *gen) action(n int) {
	t := tools[g.r.IntN(len(tools))]
	task := fmt.Sprintf("t-%d", n/20+1)
	key := fmt.Sprintf("op-%d", n)
	args, _ := json.Marshal(map[string]any{"sku": fmt.Sprintf("A-%d", g.r.IntN(1000)), "qty": 1 + g.r.IntN(9)})
	var retry *schema.RetryLink
	for attempt := 0; attempt < 3; attempt++ {
		g.calls++
		id := fmt.Sprintf("c-%d", g.calls)
		call := &schema.Call{CallID: id, Tool: t.name, Arguments: args, StartMarker: true,
			Operation: &schema.Operation{Task: task, Key: key, Contract: t.contract, Retry: retry}}
		if attempt == 0 && n%3 == 0 {
			call.RequestID = fmt.Sprintf("r-%d", n)
		}
		seq := g.add(schema.Event{Type: schema.TypeCall, Call: call})
		res := &schema.Result{CallID: id}
		var basis schema.Basis
		var review *schema.Review
		switch p := g.r.IntN(100); {
		case p < 4: // refused at admission: the body never started
			res.Status, res.Stage, res.Error = schema.StatusRejected, stages[g.r.IntN(len(stages))], "refused"
			basis = schema.BasisNotStarted
		case p < 90 || attempt == 2:
			g.started(call)
			res.Status = schema.StatusOK
			if g.r.IntN(2) == 0 {
				res.Output = json.RawMessage(fmt.Sprintf(`{"ref":"x-%d"}`, g.calls))
			}
		default:
			g.started(call)
			res.Status, res.Retryable, res.Error = uncertain[g.r.IntN(len(uncertain))], g.r.IntN(2) == 0, "boom"
			basis = schema.BasisUncertainSafe
			if !t.contract.Effect.Safe() {
				basis = schema.BasisReviewedNotExecuted
				review = &schema.Review{V: schema.Version, Session: g.cfg.Session, CallID: id,
					Operator: "alice@ops", Evidence: "ticket-" + id, Verdict: schema.VerdictNotExecuted}
			}
		}
		g.add(schema.Event{Type: schema.TypeResult, Result: res})
		if res.Status == schema.StatusOK {
			return
		}
		retry = &schema.RetryLink{PriorCallID: id, PriorSeq: seq, PlanID: "p-" + id, Basis: basis, Review: review}
	}
}
