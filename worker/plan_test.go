package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// live is a runtime on a real embedded server with the example tools.
type live struct {
	url    string
	topo   *stream.Topology
	plans  *stream.Plans
	budget *stream.Budget
	tools  *tools.Tools
}

func liveSetup(t *testing.T) *live {
	t.Helper()
	e, _, topo := streamtest.Start(t)
	tl, err := tools.New(context.Background(), tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	return &live{url: e.ClientURL(), topo: topo, plans: stream.NewPlans(topo.PlanBucket), budget: stream.NewBudget(topo.Budget), tools: tl}
}

// runtime opens session's log at epoch 1 and returns a runtime on it with
// the example tools (orders.create at revision ordersRev) and cfg changes.
func (l *live) runtime(t *testing.T, session, ordersRev string, mod func(*worker.Config)) *worker.Runtime {
	t.Helper()
	orders := l.tools.OrdersCreateTool()
	orders.Metadata = orders.Metadata.WithEffect(effect.Idempotent, ordersRev)
	reg, err := worker.NewRegistry(orders, l.tools.PaymentsChargeTool(), l.tools.CatalogLookupTool())
	if err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Session: session, Registry: reg, Plans: l.plans, Budget: l.budget, TrustedPlanners: trustedPlanners(t)}
	if mod != nil {
		mod(&cfg)
	}
	if cfg.Log == nil {
		lg, err := l.topo.Logs().OpenLog(context.Background(), session, "host", 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Log = lg
	}
	rt, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// failedOrder places an order that writes its record and then fails, and
// returns a plan for it issued in jw_plans.
func (l *live) failedOrder(t *testing.T, rt *worker.Runtime, args string) (worker.Result, schema.Plan) {
	t.Helper()
	ctx := context.Background()
	l.tools.FailAfterWrite(1)
	res, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1"})
	if !errors.Is(err, schema.ErrFailed) {
		t.Fatalf("first attempt: %v, want failed", err)
	}
	plan := l.prepare(t, rt.Session(), res.CallID)
	return res, plan
}

// prepare loads the session's history, prepares a plan for callID and
// issues it.
func (l *live) prepare(t *testing.T, session, callID string) schema.Plan {
	t.Helper()
	ctx := context.Background()
	h, err := l.topo.Logs().Load(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := recovery.PrepareRetry(schema.Events(h), callID, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan = signed(t, plan)
	if _, err := l.plans.Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// snapshot is what a refused plan must leave alone.
type snapshot struct {
	events, orders int
	calls          int64
	state          string
}

func (l *live) snap(t *testing.T, session, planID string) snapshot {
	t.Helper()
	ctx := context.Background()
	h, err := l.topo.Logs().Load(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	orders, err := l.tools.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := l.budget.Get(ctx, session, "t-1")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.plans.Get(ctx, planID)
	if err != nil && !errors.Is(err, stream.ErrPlanNotIssued) {
		t.Fatal(err)
	}
	return snapshot{events: len(h), orders: len(orders), calls: u.ToolCalls, state: rec.State}
}

func TestRetryPlanRefusals(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"A-1","qty":2}`
	first, plan := l.failedOrder(t, rt, args)
	if plan.Basis != schema.BasisUncertainSafe || plan.Key != first.Operation.Key {
		t.Fatalf("plan %+v", plan)
	}
	other := l.runtime(t, "s-2", tools.OrdersRevision, nil)
	bumped := l.runtime(t, "s-1", "orders-v2", nil)
	tampered := plan
	tampered.Key = "op-forged"
	unissued := plan
	unissued.PlanID = recovery.PlanID("s-1", "c-never")

	tests := []struct {
		name  string
		rt    *worker.Runtime
		args  string
		task  string
		plan  schema.Plan
		code  schema.Code
		field string
	}{
		{"not issued", rt, args, "t-1", unissued, schema.CodePlanNotIssued, ""},
		{"other arguments", rt, `{"sku":"A-1","qty":3}`, "t-1", plan, schema.CodePlanMismatch, "arguments"},
		{"other task", rt, args, "t-2", plan, schema.CodePlanMismatch, "task"},
		{"other session", other, args, "t-1", plan, schema.CodePlanMismatch, "session"},
		{"contract revision changed", bumped, args, "t-1", plan, schema.CodePlanMismatch, "contract"},
		{"plan altered after issue", rt, args, "t-1", tampered, schema.CodePlanMismatch, "plan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := l.snap(t, "s-1", plan.PlanID)
			p := tt.plan
			_, err := tt.rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(tt.args), worker.CallOptions{Task: tt.task, Retry: &p})
			var werr *schema.Error
			if !errors.As(err, &werr) || werr.Code != tt.code || werr.Field != tt.field || !errors.Is(err, schema.ErrPlanRefused) {
				t.Fatalf("error %v, want %s (%s)", err, tt.code, tt.field)
			}
			if after := l.snap(t, "s-1", plan.PlanID); after != before {
				t.Fatalf("a refused plan changed something: %+v → %+v", before, after)
			}
			if before.state != stream.PlanIssued {
				t.Fatalf("plan state %q, want issued", before.state)
			}
		})
	}

	// The plan still works once, for exactly the call it names …
	res, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"qty":2,"sku":"A-1"}`), worker.CallOptions{Task: "t-1", Retry: &plan})
	if err != nil {
		t.Fatal(err)
	}
	if res.Operation.Key != first.Operation.Key || res.Operation.Retry == nil || res.Operation.Retry.PriorCallID != first.CallID ||
		res.Operation.Retry.PriorSeq != first.CallSeq || res.Operation.Retry.PlanID != plan.PlanID || res.Operation.Retry.Basis != schema.BasisUncertainSafe {
		t.Fatalf("retry operation %+v / %+v", res.Operation, res.Operation.Retry)
	}
	// … and never again: a replay is refused and nothing runs.
	before := l.snap(t, "s-1", plan.PlanID)
	_, err = rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &plan})
	if !errors.Is(err, schema.ErrPlanConsumed) || !errors.Is(err, stream.ErrPlanConsumed) || !strings.Contains(err.Error(), res.CallID) {
		t.Fatalf("replay: %v, want plan_consumed naming %s", err, res.CallID)
	}
	if after := l.snap(t, "s-1", plan.PlanID); after != before || after.state != stream.PlanConsumed {
		t.Fatalf("replay changed something: %+v → %+v", before, after)
	}
	if before.orders != 1 || before.calls != 2 {
		t.Fatalf("orders %d, tool_calls %d; want 1 and 2", before.orders, before.calls)
	}
}

// TestPlanConsumedByRejectedAttempt: a plan is spent when taken, even if
// admission then refuses the attempt.
func TestPlanConsumedByRejectedAttempt(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) {
		c.Approval = worker.HookFunc(func(_ context.Context, a worker.Admission) error {
			if a.Operation.Retry != nil {
				return errors.New("retries need a human")
			}
			return nil
		})
	})
	_, plan := l.failedOrder(t, rt, `{"sku":"C-3","qty":1}`)
	res, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"sku":"C-3","qty":1}`), worker.CallOptions{Task: "t-1", Retry: &plan})
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageApproval {
		t.Fatalf("retry: %+v %v, want rejected at approval", res, err)
	}
	if _, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"sku":"C-3","qty":1}`), worker.CallOptions{Task: "t-1", Retry: &plan}); !errors.Is(err, schema.ErrPlanConsumed) {
		t.Fatalf("second use: %v, want plan_consumed", err)
	}
}

// TestPlanRaceGoroutines: many goroutines present one plan; exactly one
// attempt is recorded and runs.
func TestPlanRaceGoroutines(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"B-2","qty":4}`
	_, plan := l.failedOrder(t, rt, args)
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			p := plan
			_, errs[i] = rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &p})
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, schema.ErrPlanConsumed):
			t.Errorf("loser error %v, want plan_consumed", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d attempts won the plan, want 1", wins)
	}
	// 5 events: the first attempt in the three-event form (its task's
	// first call, counted before the task was reconciled), the retry in
	// the combined form (counted in memory: tool.call{started}, result).
	if s := l.snap(t, "s-1", plan.PlanID); s.events != 5 || s.calls != 2 || s.orders != 1 {
		t.Fatalf("after the race %+v, want 5 events (2 attempts, the retry in the combined form), tool_calls 2, 1 order", s)
	}
}

// Environment of a child process in TestPlanRaceProcesses.
const (
	envChildURL  = "JW_TEST_PLAN_CHILD_URL"
	envChildPlan = "JW_TEST_PLAN_CHILD_PLAN"
	envChildName = "JW_TEST_PLAN_CHILD_NAME"
)

// TestPlanRaceProcesses: two processes (this test binary re-executed) race
// to use one plan against the same server; exactly one succeeds.
func TestPlanRaceProcesses(t *testing.T) {
	if os.Getenv(envChildURL) != "" {
		planChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"A-1","qty":9}`
	_, plan := l.failedOrder(t, rt, args)
	pj, _ := json.Marshal(plan)

	nc, err := nats.Connect(l.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ready, err := nc.SubscribeSync("test.ready")
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	outs := make([]*strings.Builder, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPlanRaceProcesses$", "-test.v")
		cmd.Env = append(os.Environ(), envChildURL+"="+l.url, envChildPlan+"="+string(pj), fmt.Sprintf("%s=child-%d", envChildName, i))
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for range n {
		if _, err := ready.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("children not ready: %v", err)
		}
	}
	if err := nc.Publish("test.go", nil); err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		sc := bufio.NewScanner(strings.NewReader(outs[i].String()))
		found := false
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
				results[v]++
				found = true
			}
		}
		if !found {
			t.Fatalf("child %d printed no result:\n%s", i, outs[i])
		}
	}
	if results["ok"] != 1 || results[string(schema.CodePlanConsumed)] != 1 {
		t.Fatalf("child results %v, want one ok and one plan_consumed", results)
	}
	if s := l.snap(t, "s-1", plan.PlanID); s.events != 6 || s.calls != 2 || s.orders != 1 || s.state != stream.PlanConsumed {
		t.Fatalf("after the race %+v", s)
	}
}

// planChild is the child side of TestPlanRaceProcesses: connect by URL,
// signal ready, wait for go, present the plan, print the outcome.
func planChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(os.Getenv(envChildURL))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	topo, err := stream.EnsureTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var plan schema.Plan
	if err := json.Unmarshal([]byte(os.Getenv(envChildPlan)), &plan); err != nil {
		t.Fatal(err)
	}
	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := worker.NewRegistry(tl.List()...)
	lg, err := topo.Logs().OpenLog(ctx, plan.Session, "host", 1)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: plan.Session, Log: lg, Registry: reg, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget), TrustedPlanners: trustedPlanners(t)})
	if err != nil {
		t.Fatal(err)
	}
	start, err := nc.SubscribeSync("test.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("test.ready", []byte(os.Getenv(envChildName))); err != nil {
		t.Fatal(err)
	}
	if _, err := start.NextMsg(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = rt.CallWithOptions(ctx, plan.Tool, plan.Arguments, worker.CallOptions{Task: plan.Task, Retry: &plan})
	switch {
	case err == nil:
		fmt.Println("RESULT ok")
	default:
		fmt.Println("RESULT " + string(schema.CodeOf(err)))
		if schema.CodeOf(err) == "" {
			fmt.Println(err)
		}
	}
}

// TestBudgetLimitUnderConcurrency: with a limit of 3 tool calls, six
// concurrent calls are all counted; exactly three pass admission, three are
// rejected at stage budget without running. (Exact counting across separate
// processes' counters is stream.TestBudgetConcurrent.)
func TestBudgetLimitUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	if _, err := l.budget.SetLimit(ctx, "s-1", "t-1", 3); err != nil {
		t.Fatal(err)
	}
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = rt.CallWithOptions(ctx, tools.CatalogLookup, json.RawMessage(`{"sku":"A-1"}`), worker.CallOptions{Task: "t-1"})
		})
	}
	wg.Wait()
	okN, rejected := 0, 0
	for _, err := range errs {
		var werr *schema.Error
		switch {
		case err == nil:
			okN++
		case errors.As(err, &werr) && werr.Code == schema.CodeRejected && werr.Stage == schema.StageBudget:
			rejected++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	u, err := l.budget.Get(ctx, "s-1", "t-1")
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, ev := range h {
		if ev.Type == schema.TypeStarted {
			started++
		}
	}
	if okN != 3 || rejected != 3 || u.ToolCalls != 6 || started != 3 {
		t.Fatalf("ok %d, rejected %d, tool_calls %d, started %d; want 3, 3, 6, 3", okN, rejected, u.ToolCalls, started)
	}
}

// TestFencedByTakeover: after another writer fences the session, the old
// runtime's next call fails with fenced, nothing of it is recorded, and it
// never writes again.
func TestFencedByTakeover(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	if _, err := rt.CallWithOptions(ctx, tools.CatalogLookup, json.RawMessage(`{"sku":"A-1"}`), worker.CallOptions{Task: "t-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.topo.Logs().Fence(ctx, "s-1", "host-b", 2); err != nil {
		t.Fatal(err)
	}
	before := l.snap(t, "s-1", "p-none")
	for range 2 {
		_, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(`{"sku":"A-1","qty":1}`), worker.CallOptions{Task: "t-1"})
		if !errors.Is(err, schema.ErrFenced) || !errors.Is(err, stream.ErrFenced) {
			t.Fatalf("call after takeover: %v, want fenced", err)
		}
	}
	after := l.snap(t, "s-1", "p-none")
	if after.events != before.events || after.orders != 0 {
		t.Fatalf("a fenced runtime changed something: %+v → %+v", before, after)
	}
}

// TestRetryTaskDefaultsToPlan: a retry that names no task runs in the
// plan's task.
func TestRetryTaskDefaultsToPlan(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"A-1","qty":5}`
	_, plan := l.failedOrder(t, rt, args)
	res, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Retry: &plan})
	if err != nil || res.Operation.Task != "t-1" {
		t.Fatalf("retry %+v, %v", res.Operation, err)
	}
}

// TestForgedPlanRecordsRunNothing: records written straight into jw_plans
// (what a client with write access to the bucket could do) authorize
// nothing. A made-up plan, the real plan id re-signed by an untrusted key
// with other arguments, the real signed plan with its arguments altered,
// and a consumed record reset to issued: each is refused before anything is
// recorded or run, and the order is written once.
func TestForgedPlanRecordsRunNothing(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"A-1","qty":2}`
	first, plan := l.failedOrder(t, rt, args)
	mallory, _ := nkeys.CreateUser()
	put := func(t *testing.T, rec stream.PlanRecord) {
		t.Helper()
		b, _ := json.Marshal(rec)
		if _, err := l.topo.PlanBucket.Put(ctx, rec.Plan.PlanID, b); err != nil {
			t.Fatal(err)
		}
	}
	attempt := func(t *testing.T, rt *worker.Runtime, p schema.Plan, args string, want schema.Code) {
		t.Helper()
		before := l.snap(t, "s-1", plan.PlanID)
		_, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &p})
		if schema.CodeOf(err) != want || !errors.Is(err, schema.ErrPlanRefused) {
			t.Fatalf("error %v, want %s", err, want)
		}
		after := l.snap(t, "s-1", plan.PlanID)
		if after.events != before.events || after.orders != before.orders || after.calls != before.calls {
			t.Fatalf("a forged plan changed something: %+v → %+v", before, after)
		}
	}

	t.Run("made-up plan", func(t *testing.T) {
		fake := plan
		fake.PlanID, fake.PriorCallID = recovery.PlanID("s-1", "c-made-up"), "c-made-up"
		fake.Signer, fake.Sig = "", ""
		put(t, stream.PlanRecord{State: stream.PlanIssued, Plan: fake})
		attempt(t, rt, fake, args, schema.CodePlanUntrusted)
	})
	t.Run("real plan id, other arguments, untrusted signature", func(t *testing.T) {
		other := plan
		other.Arguments = json.RawMessage(`{"qty":3,"sku":"A-1"}`)
		other.ArgsDigest, _ = schema.ArgsDigest(other.Arguments)
		other, _ = recovery.SignPlan(mallory, other)
		put(t, stream.PlanRecord{State: stream.PlanIssued, Plan: other})
		attempt(t, rt, other, `{"sku":"A-1","qty":3}`, schema.CodePlanUntrusted)
	})
	t.Run("real signature, arguments altered", func(t *testing.T) {
		altered := plan
		altered.Arguments = json.RawMessage(`{"qty":3,"sku":"A-1"}`)
		altered.ArgsDigest, _ = schema.ArgsDigest(altered.Arguments)
		put(t, stream.PlanRecord{State: stream.PlanIssued, Plan: altered})
		attempt(t, rt, altered, `{"sku":"A-1","qty":3}`, schema.CodePlanUntrusted)
	})

	// The real plan, restored, runs once.
	put(t, stream.PlanRecord{State: stream.PlanIssued, Plan: plan})
	res, err := rt.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &plan})
	if err != nil {
		t.Fatal(err)
	}
	if res.Operation.Retry == nil || res.Operation.Retry.Sig != plan.Sig || res.Operation.Retry.Signer != plan.Signer || !res.Operation.Retry.IssuedAt.Equal(plan.IssuedAt) {
		t.Fatalf("retry link %+v does not carry the plan's signature", res.Operation.Retry)
	}
	t.Run("consumed record reset to issued", func(t *testing.T) {
		put(t, stream.PlanRecord{State: stream.PlanIssued, Plan: plan})
		attempt(t, rt, plan, args, schema.CodePlanConsumed)
		// A new owner of the session, opened on the confirmed history,
		// refuses it too.
		h, err := l.topo.Logs().Load(ctx, "s-1")
		if err != nil {
			t.Fatal(err)
		}
		fresh := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.History = h })
		attempt(t, fresh, plan, args, schema.CodePlanConsumed)
	})
	if orders, _ := l.tools.Orders(ctx); len(orders) != 1 {
		t.Fatalf("%d orders, want 1", len(orders))
	}
	// The history verifies offline: the retry was authorized by the planner.
	h, _ := l.topo.Logs().Load(ctx, "s-1")
	if err := recovery.VerifyRetries(schema.Events(h), trustedPlanners(t), nil); err != nil {
		t.Fatalf("VerifyRetries: %v", err)
	}
	_ = first
}

// appendFails is a session log whose appends of events of type typ fail
// with err, the others going through to Log: a log that went away between
// a plan's consumption and the attempt's tool.call, or a writer killed
// between its body and its tool.result.
type appendFails struct {
	*stream.Log
	typ string
	err error
}

func (l appendFails) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	if ev.Type == l.typ {
		return 0, l.err
	}
	return l.Log.Append(ctx, ev)
}

// TestPlanCompletedByNextOwner: a plan consumed by an attempt whose
// tool.call then failed to reach the log is not lost. The session's next
// owner (a higher epoch, which fenced the consumer) completes that attempt
// once, under the call id the plan was consumed for; the order is written
// once; a later owner, or the same one again, is refused: the log holds
// the attempt.
func TestPlanCompletedByNextOwner(t *testing.T) {
	ctx := context.Background()
	l := liveSetup(t)
	rt := l.runtime(t, "s-1", tools.OrdersRevision, nil)
	args := `{"sku":"A-1","qty":4}`
	_, plan := l.failedOrder(t, rt, args)

	// Epoch 1: the plan is consumed, then the attempt's tool.call is lost.
	lg1, err := l.topo.Logs().OpenLog(ctx, "s-1", "host", 1)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := l.topo.Logs().Load(ctx, "s-1")
	lost := l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) {
		c.Log, c.History = appendFails{lg1, schema.TypeCall, errors.New("injected: the server went away")}, h1
	})
	_, err = lost.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &plan})
	if schema.CodeOf(err) != schema.CodeLog {
		t.Fatalf("attempt with a lost tool.call: %v, want log_unavailable", err)
	}
	rec, err := l.plans.Get(ctx, plan.PlanID)
	if err != nil || rec.State != stream.PlanConsumed || rec.ConsumedBy == "" || rec.ConsumedEpoch != 1 {
		t.Fatalf("plan record after the lost attempt: %+v %v", rec, err)
	}
	before := l.snap(t, "s-1", plan.PlanID)

	// Epoch 2: the next owner fences the session and completes the
	// attempt under the consumed call id.
	takeOver := func(epoch uint64) *worker.Runtime {
		lg, h, err := l.topo.Logs().FenceLoad(ctx, "s-1", "host", epoch)
		if err != nil {
			t.Fatal(err)
		}
		return l.runtime(t, "s-1", tools.OrdersRevision, func(c *worker.Config) { c.Log, c.History = lg, h })
	}
	rt2 := takeOver(2)
	res, err := rt2.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &plan})
	if err != nil || res.Status != schema.StatusOK || res.CallID != rec.ConsumedBy || res.Operation.Retry == nil || res.Operation.Retry.PlanID != plan.PlanID {
		t.Fatalf("completion: %+v %v, want ok under call %s", res, err, rec.ConsumedBy)
	}
	if rec, _ := l.plans.Get(ctx, plan.PlanID); rec.CompletedEpoch != 2 || rec.ConsumedBy != res.CallID {
		t.Fatalf("plan record after the completion: %+v", rec)
	}
	after := l.snap(t, "s-1", plan.PlanID)
	if after.orders != before.orders || after.calls != before.calls+1 {
		t.Fatalf("completion: %+v → %+v, want the same orders and one more attempt billed", before, after)
	}

	// A second completion is refused, by the same owner or the next.
	for _, r := range []*worker.Runtime{rt2, takeOver(3)} {
		before := l.snap(t, "s-1", plan.PlanID)
		_, err := r.CallWithOptions(ctx, tools.OrdersCreate, json.RawMessage(args), worker.CallOptions{Task: "t-1", Retry: &plan})
		if !errors.Is(err, schema.ErrPlanConsumed) || !strings.Contains(err.Error(), res.CallID) {
			t.Fatalf("second completion: %v, want plan_consumed naming %s", err, res.CallID)
		}
		if after := l.snap(t, "s-1", plan.PlanID); after.events != before.events || after.calls != before.calls {
			t.Fatalf("a refused completion changed something: %+v → %+v", before, after)
		}
	}
	// One recorded attempt for the plan, in the whole log.
	h, _ := l.topo.Logs().Load(ctx, "s-1")
	n := 0
	for _, ev := range h {
		if c := ev.Call; c != nil && c.Operation != nil && c.Operation.Retry != nil && c.Operation.Retry.PlanID == plan.PlanID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d recorded attempts of plan %s, want 1", n, plan.PlanID)
	}
	if orders, _ := l.tools.Orders(ctx); len(orders) != 1 {
		t.Fatalf("%d orders, want 1", len(orders))
	}
}
