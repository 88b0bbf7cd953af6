package recovery_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

var allEffects = []effect.Effect{effect.Unknown, effect.ReadOnly, effect.Idempotent, effect.NonIdempotent}

// uncertainDecision is the decision table's last two rows, written out.
var uncertainDecision = map[effect.Effect]schema.Decision{
	effect.Unknown:       schema.DecisionNeedsReview,
	effect.ReadOnly:      schema.DecisionRetryAllowed,
	effect.Idempotent:    schema.DecisionRetryAllowed,
	effect.NonIdempotent: schema.DecisionNeedsReview,
}

type row struct {
	name     string
	events   func(eff effect.Effect) []schema.Event
	outcome  schema.Outcome
	evidence string
	// decision is fixed, or "" for an uncertain row (uncertainDecision).
	decision schema.Decision
}

// decisionRows returns one row per fact of the decision table; each runs
// under every effect.
func decisionRows() []row {
	rows := []row{
		{
			name: "ok result",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, true), startedEv("c-1"), resultEv("c-1", schema.StatusOK, "")}
			},
			outcome: schema.OutcomeCompleted, evidence: "ok", decision: schema.DecisionRefuse,
		},
		{
			name: "ok result without start marker",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, false), resultEv("c-1", schema.StatusOK, "")}
			},
			outcome: schema.OutcomeCompleted, evidence: "ok", decision: schema.DecisionRefuse,
		},
		{
			name: "marker, no started, no result",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, true)}
			},
			outcome: schema.OutcomeNotStarted, evidence: "not_started_marker", decision: schema.DecisionRetryAllowed,
		},
		{
			name: "marker, no started, no result, session fenced",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, true), fencedEv()}
			},
			outcome: schema.OutcomeNotStarted, evidence: "not_started_marker", decision: schema.DecisionRetryAllowed,
		},
		{
			name: "marker, started, no result",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, true), startedEv("c-1"), fencedEv()}
			},
			outcome: schema.OutcomeUncertain, evidence: "no_result",
		},
		{
			name: "no marker protocol, no result",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, false)}
			},
			outcome: schema.OutcomeUncertain, evidence: "no_result",
		},
		{
			name: "no marker protocol, started, no result",
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, false), startedEv("c-1")}
			},
			outcome: schema.OutcomeUncertain, evidence: "no_result",
		},
	}
	for _, stage := range []schema.Stage{schema.StagePermission, schema.StageArguments, schema.StageGuard, schema.StageApproval, schema.StageBudget} {
		rows = append(rows, row{
			name: "rejected at " + string(stage),
			events: func(eff effect.Effect) []schema.Event {
				return []schema.Event{callEv("c-1", eff, true), resultEv("c-1", schema.StatusRejected, stage)}
			},
			outcome: schema.OutcomeNotStarted, evidence: "rejected:" + string(stage), decision: schema.DecisionRetryAllowed,
		})
	}
	for _, st := range []schema.Status{schema.StatusFailed, schema.StatusTimeout, schema.StatusCancelled, schema.StatusBudgetExhausted, schema.StatusOutputLimit} {
		for _, retryable := range []bool{false, true} {
			rows = append(rows, row{
				name: string(st) + map[bool]string{false: "", true: " retryable"}[retryable],
				events: func(eff effect.Effect) []schema.Event {
					r := resultEv("c-1", st, "")
					r.Result.Retryable = retryable // never proves non-execution
					return []schema.Event{callEv("c-1", eff, true), startedEv("c-1"), r}
				},
				outcome: schema.OutcomeUncertain, evidence: string(st),
			})
		}
	}
	return rows
}

func TestInspectDecisionTable(t *testing.T) {
	for _, r := range decisionRows() {
		for _, eff := range allEffects {
			t.Run(r.name+"/"+eff.String(), func(t *testing.T) {
				evs := r.events(eff)
				want := r.decision
				if want == "" {
					want = uncertainDecision[eff]
				}
				a, err := recovery.Inspect(hist(evs...), "c-1")
				if err != nil {
					t.Fatalf("Inspect: %v", err)
				}
				if a.Outcome != r.outcome || a.Evidence != r.evidence || a.Decision != want {
					t.Errorf("got %s/%s/%s, want %s/%s/%s", a.Outcome, a.Evidence, a.Decision, r.outcome, r.evidence, want)
				}
				wantA := schema.Assessment{
					Session: testSession, CallID: "c-1", Tool: "orders.create", Task: "t-1", Key: "op-1",
					Contract: effect.Contract{Effect: eff, Revision: "orders-v1"},
					Outcome:  a.Outcome, Evidence: a.Evidence, Decision: a.Decision,
					Attempts: 1, Chain: []string{"c-1"},
				}
				if !reflect.DeepEqual(a, wantA) {
					t.Errorf("assessment\n got %+v\nwant %+v", a, wantA)
				}
				// The same history read from JSON Lines classifies the same.
				b, err := recovery.Inspect(reader(jsonl(t, evs...)), "c-1")
				if err != nil || !reflect.DeepEqual(a, b) {
					t.Errorf("from JSON Lines: %+v, %v", b, err)
				}
			})
		}
	}
}

func TestInspectChain(t *testing.T) {
	h := []schema.Event{
		callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, ""),
		retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusRejected, schema.StageApproval),
		retryEv("c-3", effect.Idempotent, "c-2", 4), startedEv("c-3"),
		// another logical action in the same task with its own key
		with(callEv("d-1", effect.NonIdempotent, true), func(c *schema.Call) { c.Operation.Key = "op-2" }),
		// the same key in another task is another logical action
		with(callEv("e-1", effect.NonIdempotent, true), func(c *schema.Call) { c.Operation.Task = "t-2" }),
		{V: 1, Session: testSession, At: testAt, Type: "x.unknown"},
		fencedEv(),
	}
	a, err := recovery.Inspect(hist(h...), "c-3")
	if err != nil {
		t.Fatal(err)
	}
	if a.Attempts != 3 || !reflect.DeepEqual(a.Chain, []string{"c-1", "c-2", "c-3"}) {
		t.Errorf("attempts %d chain %v, want 3 [c-1 c-2 c-3]", a.Attempts, a.Chain)
	}
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionRetryAllowed {
		t.Errorf("got %s/%s", a.Outcome, a.Decision)
	}
	for _, id := range []string{"d-1", "e-1"} {
		a, err := recovery.Inspect(hist(h...), id)
		if err != nil || a.Attempts != 1 || a.Outcome != schema.OutcomeNotStarted {
			t.Errorf("%s: %+v %v", id, a, err)
		}
	}
	// Arguments that differ only in member order and spacing are the same
	// canonical arguments.
	h2 := []schema.Event{
		callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, ""),
		with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Arguments = []byte(`{ "qty" : 2, "sku":"A-1" }`) }),
	}
	if a, err := recovery.Inspect(hist(h2...), "c-2"); err != nil || a.Attempts != 2 {
		t.Errorf("reordered arguments: %+v %v", a, err)
	}
}

// TestSourceReusesBuffers: a history source may reuse the arguments'
// buffer once the event has been yielded; Inspect must not read it later.
func TestSourceReusesBuffers(t *testing.T) {
	const calls = 600
	buf := make([]byte, 0, 64)
	h := func(yield func(schema.Event, error) bool) {
		seq := uint64(0)
		emit := func(e schema.Event, args string) bool {
			buf = append(buf[:0], args...)
			e.Call.Arguments = buf
			seq++
			e.Seq = seq
			ok := yield(e, nil)
			copy(buf, strings.Repeat("#", len(buf))) // the source reuses its buffer
			return ok
		}
		for i := range calls {
			e := with(callEv("c-"+strconv.Itoa(i), effect.Idempotent, false), func(c *schema.Call) { c.Operation.Key = "k-" + strconv.Itoa(i) })
			if !emit(e, `{"n":`+strconv.Itoa(i)+`}`) {
				return
			}
		}
		r := with(retryEv("r-0", effect.Idempotent, "c-0", 1), func(c *schema.Call) { c.Operation.Key = "k-0" })
		emit(r, `{ "n" : 0 }`)
	}
	a, err := recovery.Inspect(h, "r-0")
	if err != nil {
		t.Fatal(err)
	}
	if a.Attempts != 2 {
		t.Errorf("attempts %d, want 2", a.Attempts)
	}
	p, err := recovery.PrepareRetry(h, "r-0", nil)
	if err != nil || string(p.Arguments) != `{"n":0}` {
		t.Errorf("plan arguments %s, %v", p.Arguments, err)
	}
}

// TestLargeHistoryChains runs the retry checks across a large history:
// most calls complete, a few fail and are retried much later.
func TestLargeHistoryChains(t *testing.T) {
	const calls = 2000
	build := func(retryArgs string) []schema.Event {
		var evs []schema.Event
		for i := range calls {
			id := "c-" + strconv.Itoa(i)
			e := with(callEv(id, effect.Idempotent, true), func(c *schema.Call) {
				c.Operation.Key = "k-" + strconv.Itoa(i)
				c.Arguments = []byte(`{"n":` + strconv.Itoa(i) + `,"sku":"A"}`)
			})
			st := schema.StatusOK
			if i%500 == 7 {
				st = schema.StatusFailed
			}
			evs = append(evs, e, startedEv(id), resultEv(id, st, ""))
		}
		// retry c-1507 (seq 3*1507+1) at the very end
		return append(evs, with(retryEv("r-1", effect.Idempotent, "c-1507", 3*1507+1), func(c *schema.Call) {
			c.Operation.Key = "k-1507"
			c.Arguments = []byte(retryArgs)
		}))
	}
	a, err := recovery.Inspect(hist(build(`{"sku":"A","n":1507}`)...), "r-1")
	if err != nil || a.Attempts != 2 || a.Chain[0] != "c-1507" {
		t.Fatalf("%+v %v", a, err)
	}
	_, err = recovery.Inspect(hist(build(`{"sku":"A","n":1508}`)...), "c-3")
	if schema.CodeOf(err) != schema.CodeCorruptHistory || !strings.Contains(err.Error(), "different arguments") {
		t.Fatalf("changed arguments in a large history: %v", err)
	}
}

// TestRetryCanonicalArguments: a retry's arguments are compared with its
// prior call's in canonical form (schema.Canonical: members sorted, no
// insignificant whitespace, escapes and numbers by exact value), whether or
// not their bytes are identical; differing values are corrupt_history.
func TestRetryCanonicalArguments(t *testing.T) {
	const prior = `{"sku":"A-1","qty":2}`
	tests := []struct {
		name, args string
		same       bool   // canonically equal to prior
		want       string // error text, when not same
	}{
		{"identical bytes", prior, true, ""},
		{"member order", `{"qty":2,"sku":"A-1"}`, true, ""},
		{"whitespace", "{ \"sku\" : \"A-1\",\n\t\"qty\" : 2 }", true, ""},
		{"number spelled 2.0", `{"sku":"A-1","qty":2.0}`, true, ""},
		{"number spelled 20e-1", `{"sku":"A-1","qty":20e-1}`, true, ""},
		{"string escape", `{"sku":"\u0041-1","qty":2}`, true, ""},
		{"other number", `{"sku":"A-1","qty":3}`, false, "different arguments"},
		{"number 2.000001", `{"sku":"A-1","qty":2.000001}`, false, "different arguments"},
		{"other string", `{"sku":"A-2","qty":2}`, false, "different arguments"},
		{"extra member", `{"sku":"A-1","qty":2,"note":null}`, false, "different arguments"},
		{"number as string", `{"sku":"A-1","qty":"2"}`, false, "different arguments"},
		{"duplicate member", `{"sku":"A-1","qty":2,"qty":2}`, false, `call "c-3" (seq 5): arguments`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// the precondition, by schema's own word
			a, errA := schema.Canonical([]byte(prior))
			b, errB := schema.Canonical([]byte(tt.args))
			if errA != nil || (errB == nil && string(a) == string(b)) != tt.same {
				t.Fatalf("schema.Canonical: %s %v, %s %v: same %v is wrong", a, errA, b, errB, tt.same)
			}
			// c-2 retries c-1 with the same bytes, c-3 retries c-2 with tt.args
			h := hist(
				callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, ""),
				retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusTimeout, ""),
				with(retryEv("c-3", effect.Idempotent, "c-2", 3), func(c *schema.Call) { c.Arguments = []byte(tt.args) }),
			)
			as, err := recovery.Inspect(h, "c-3")
			if !tt.same {
				if schema.CodeOf(err) != schema.CodeCorruptHistory || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Inspect: %+v %v, want corrupt_history with %q", as, err, tt.want)
				}
				return
			}
			if err != nil || as.Attempts != 3 {
				t.Fatalf("Inspect: %+v %v", as, err)
			}
			p, err := recovery.PrepareRetry(h, "c-3", nil)
			if err != nil || string(p.Arguments) != string(b) {
				t.Fatalf("PrepareRetry: %s %v, want arguments %s", p.Arguments, err, b)
			}
			if d, _ := schema.ArgsDigest([]byte(tt.args)); p.ArgsDigest != d {
				t.Errorf("args_digest %s, want %s", p.ArgsDigest, d)
			}
		})
	}
}

// TestRetryArgumentErrors: arguments that do not canonicalize are
// corrupt_history naming the call, when a check needs them: the inspected
// call's, and a retry's and its prior's when their bytes differ.
func TestRetryArgumentErrors(t *testing.T) {
	bad := func(e schema.Event) schema.Event {
		return with(e, func(c *schema.Call) { c.Arguments = []byte(`{"sku":"A-1","qty":02}`) })
	}
	tests := []struct {
		name   string
		evs    []schema.Event
		target string
		want   string
	}{
		{"prior's", []schema.Event{bad(callEv("c-1", effect.Idempotent, true)), resultEv("c-1", schema.StatusFailed, ""), retryEv("c-2", effect.Idempotent, "c-1", 1)}, "c-2", `call "c-1" (seq 1): arguments`},
		{"retry's, the target failed", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, ""), bad(retryEv("c-2", effect.Idempotent, "c-1", 1)), resultEv("c-2", schema.StatusFailed, "")}, "c-2", `call "c-2" (seq 3): arguments`},
		{"retry's, another call inspected", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, ""), bad(retryEv("c-2", effect.Idempotent, "c-1", 1)), resultEv("c-2", schema.StatusOK, "")}, "c-1", `call "c-2" (seq 3): arguments`},
		{"open target's", []schema.Event{bad(callEv("c-1", effect.Idempotent, true))}, "c-1", `call "c-1" (seq 1): arguments`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := recovery.Inspect(hist(tt.evs...), tt.target)
			if schema.CodeOf(err) != schema.CodeCorruptHistory || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Inspect: %+v %v, want corrupt_history with %q", a, err, tt.want)
			}
		})
	}
}

// TestWriterMayRun: the evidence that leaves a body possibly running is
// the one `jingwei status` marks WRITER "may run" and the console warns of.
func TestWriterMayRun(t *testing.T) {
	for ev, want := range map[string]bool{"no_result": true, "timeout": true, "cancelled": true, "failed": false, "ok": false, "not_started_marker": false, "rejected:approval": false} {
		if got := recovery.WriterMayRun(ev); got != want {
			t.Errorf("WriterMayRun(%q) = %v, want %v", ev, got, want)
		}
	}
}
