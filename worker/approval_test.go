package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
)

// clock is a settable clock for deadlines.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type approvalFixture struct {
	*fixture
	kp    nkeys.KeyPair
	clock *clock
	cfg   worker.Config
}

// chargeTool is a non-idempotent payment whose charges above 1000 wait for
// approval (for a minute).
func chargeTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{Name: "payments.charge"}.WithEffect(effect.NonIdempotent, "pay-v1"),
		Approval: &worker.ApprovalRule{Timeout: time.Minute, When: func(args json.RawMessage) bool {
			var a struct{ Amount int64 }
			_ = json.Unmarshal(args, &a)
			return a.Amount > 1000
		}},
		Body: okBody(),
	}
}

func setupApprovals(t *testing.T, mod func(*worker.Config)) *approvalFixture {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)
	af := &approvalFixture{kp: kp, clock: &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}}
	af.fixture = setup(t, chargeTool(), func(c *worker.Config) {
		c.TrustedApprovers, c.Now = trusted, af.clock.now
		if mod != nil {
			mod(c)
		}
		af.cfg = *c
	})
	return af
}

func (af *approvalFixture) answer(t *testing.T, callID string, d schema.ApprovalDecision) schema.Approval {
	t.Helper()
	a, err := recovery.SignApproval(af.kp, schema.Approval{V: 1, Session: "s-1", CallID: callID, Decision: d, Approver: "alice@ops", Reason: "ok by finance"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// reopen makes c (a new fixture's config: its own log, registry and
// counter) a next owner of the session of old, opened on history h.
func reopen(c *worker.Config, old worker.Config, h []schema.Event) {
	c.TrustedApprovers, c.Now, c.BudgetLimit = old.TrustedApprovers, old.Now, old.BudgetLimit
	c.Log.(*memLog).events = append([]schema.Event(nil), h...)
	c.History = h
}

func park(t *testing.T, rt *worker.Runtime, amount string) worker.Result {
	t.Helper()
	res, err := rt.CallWithOptions(context.Background(), "payments.charge", json.RawMessage(`{"amount":`+amount+`}`), worker.CallOptions{Task: "t-1"})
	if !errors.Is(err, schema.ErrApprovalPending) || res.CallID == "" || res.Status != "" {
		t.Fatalf("call of %s: %+v, %v; want approval_pending", amount, res, err)
	}
	return res
}

// TestApprovalPolicy: only the calls the tool's rule selects wait; a
// waiting call is recorded (tool.call, approval.requested, counted) and
// its body does not run.
func TestApprovalPolicy(t *testing.T) {
	af := setupApprovals(t, nil)
	if _, err := af.rt.CallWithOptions(context.Background(), "payments.charge", json.RawMessage(`{"amount":10}`), worker.CallOptions{Task: "t-1"}); err != nil {
		t.Fatalf("small charge: %v", err)
	}
	res := park(t, af.rt, "5000")
	if af.runs.Load() != 1 {
		t.Fatalf("body ran %d times, want 1 (the small charge)", af.runs.Load())
	}
	if got := af.log.types(); got != "tool.call,tool.started,tool.result,tool.call,approval.requested" {
		t.Fatalf("log: %s", got)
	}
	ev := af.log.all()[4]
	if ev.ApprovalRequest.CallID != res.CallID || !ev.ApprovalRequest.Deadline.Equal(af.clock.now().Add(time.Minute)) {
		t.Fatalf("approval.requested: %+v", ev.ApprovalRequest)
	}
	if af.budget.get("s-1", "t-1") != 2 {
		t.Fatalf("tool_calls %d, want 2", af.budget.get("s-1", "t-1"))
	}
	if w := af.rt.Waiting(); len(w) != 1 || w[0].CallID != res.CallID {
		t.Fatalf("waiting: %+v", w)
	}
}

// TestApprovalHonouredOnce: an approval starts the body once; the same
// approval again (a replay), one for another call, a forged, an altered
// and an untrusted one are refused with invalid_approval and run nothing.
func TestApprovalHonouredOnce(t *testing.T) {
	af := setupApprovals(t, nil)
	res := park(t, af.rt, "5000")
	ctx := context.Background()

	other, _ := nkeys.CreateUser()
	untrusted, _ := recovery.SignApproval(other, schema.Approval{V: 1, Session: "s-1", CallID: res.CallID, Decision: schema.Approved, Approver: "mallory"})
	altered := af.answer(t, res.CallID, schema.Denied)
	altered.Decision = schema.Approved
	unsigned := af.answer(t, res.CallID, schema.Approved)
	unsigned.Sig, unsigned.Signer = "", ""
	wrongCall := af.answer(t, "c-other", schema.Approved)
	wrongSession := af.answer(t, res.CallID, schema.Approved)
	wrongSession.Session = "s-2"
	for name, a := range map[string]schema.Approval{"untrusted": untrusted, "altered": altered, "unsigned": unsigned, "another call": wrongCall, "another session": wrongSession} {
		if _, err := af.rt.Resume(ctx, a, time.Time{}); !errors.Is(err, schema.ErrInvalidApproval) {
			t.Errorf("%s: %v, want invalid_approval", name, err)
		}
	}
	if af.runs.Load() != 0 || len(af.rt.Waiting()) != 1 {
		t.Fatalf("refused approvals changed something: runs %d, waiting %v", af.runs.Load(), af.rt.Waiting())
	}
	good := af.answer(t, res.CallID, schema.Approved)
	got, err := af.rt.Resume(ctx, good, time.Time{})
	if err != nil || got.Status != schema.StatusOK || got.CallID != res.CallID {
		t.Fatalf("approved: %+v, %v", got, err)
	}
	if _, err := af.rt.Resume(ctx, good, time.Time{}); !errors.Is(err, schema.ErrInvalidApproval) {
		t.Fatalf("replayed approval: %v, want invalid_approval", err)
	}
	if af.runs.Load() != 1 {
		t.Fatalf("body ran %d times, want 1", af.runs.Load())
	}
	if got := af.log.types(); got != "tool.call,approval.requested,approval.granted,tool.started,tool.result" {
		t.Fatalf("log: %s", got)
	}
	// A new attempt needs its own approval: the old one does not answer it.
	next := park(t, af.rt, "5000")
	if _, err := af.rt.Resume(ctx, good, time.Time{}); !errors.Is(err, schema.ErrInvalidApproval) {
		t.Fatalf("old approval for a new call: %v", err)
	}
	if w := af.rt.Waiting(); len(w) != 1 || w[0].CallID != next.CallID || af.runs.Load() != 1 {
		t.Fatalf("the new call: waiting %v, runs %d", w, af.runs.Load())
	}
}

// TestApprovalDeniedAndTimedOut: a denial and a deadline without answer
// end the call rejected at stage approval; an approval that arrives after
// the deadline does too. The body never runs.
func TestApprovalDeniedAndTimedOut(t *testing.T) {
	af := setupApprovals(t, nil)
	ctx := context.Background()
	denied := park(t, af.rt, "5000")
	res, err := af.rt.Resume(ctx, af.answer(t, denied.CallID, schema.Denied), time.Time{})
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageApproval || res.Error != "denied by alice@ops: ok by finance" {
		t.Fatalf("denied: %+v, %v", res, err)
	}
	timedOut := park(t, af.rt, "5000")
	late := park(t, af.rt, "6000")
	if out := af.rt.Expire(ctx, af.clock.now().Add(59*time.Second)); len(out) != 0 {
		t.Fatalf("expired early: %+v", out)
	}
	if next, ok := af.rt.NextDeadline(); !ok || !next.Equal(af.clock.now().Add(time.Minute)) {
		t.Fatalf("next deadline %v %v", next, ok)
	}
	af.clock.add(2 * time.Minute)
	// received after the deadline: refused like the timeout
	res, err = af.rt.Resume(ctx, af.answer(t, late.CallID, schema.Approved), af.clock.now())
	if !errors.Is(err, schema.ErrRejected) || res.Stage != schema.StageApproval {
		t.Fatalf("late approval: %+v, %v", res, err)
	}
	out := af.rt.Expire(ctx, af.clock.now())
	if len(out) != 1 || out[0].CallID != timedOut.CallID || out[0].Stage != schema.StageApproval {
		t.Fatalf("expired: %+v", out)
	}
	if af.runs.Load() != 0 || len(af.rt.Waiting()) != 0 {
		t.Fatalf("runs %d, waiting %v", af.runs.Load(), af.rt.Waiting())
	}
	// The log is a valid history and each call is not_started, retry_allowed.
	h := af.log.all()
	for _, id := range []string{denied.CallID, timedOut.CallID, late.CallID} {
		a, err := recovery.Inspect(schema.Events(h), id)
		if err != nil || a.Outcome != schema.OutcomeNotStarted || a.Evidence != "rejected:approval" {
			t.Errorf("%s: %+v, %v", id, a, err)
		}
	}
}

// TestApprovalResumedByNextOwner: a runtime opened on a history with a
// call waiting for approval waits for it again (no new call, nothing
// asked as new); the approval runs it once. A history in which the
// approval was recorded but tool.started was not is not waiting any more:
// the old approval runs nothing (the call is not_started, for a plan).
func TestApprovalResumedByNextOwner(t *testing.T) {
	af := setupApprovals(t, nil)
	res := park(t, af.rt, "5000")
	h := af.log.all()

	next := setup(t, chargeTool(), func(c *worker.Config) {
		reopen(c, af.cfg, h)
	})
	if w := next.rt.Waiting(); len(w) != 1 || w[0].CallID != res.CallID || w[0].Task != "t-1" {
		t.Fatalf("next owner waits for %+v", w)
	}
	ap := af.answer(t, res.CallID, schema.Approved)
	got, err := next.rt.Resume(context.Background(), ap, time.Time{})
	if err != nil || got.Status != schema.StatusOK {
		t.Fatalf("resumed: %+v, %v", got, err)
	}
	if next.runs.Load() != 1 || next.log.types() != "tool.call,approval.requested,approval.granted,tool.started,tool.result" {
		t.Fatalf("runs %d, log %s", next.runs.Load(), next.log.types())
	}

	// Crash after approval.granted, before tool.started.
	granted := next.log.all()[:3]
	third := setup(t, chargeTool(), func(c *worker.Config) {
		reopen(c, af.cfg, granted)
	})
	if w := third.rt.Waiting(); len(w) != 0 {
		t.Fatalf("approved call still waits: %+v", w)
	}
	if _, err := third.rt.Resume(context.Background(), ap, time.Time{}); !errors.Is(err, schema.ErrInvalidApproval) || third.runs.Load() != 0 {
		t.Fatalf("old approval after the crash: %v, runs %d", err, third.runs.Load())
	}
	if a, err := recovery.Inspect(schema.Events(granted), res.CallID); err != nil || a.Outcome != schema.OutcomeNotStarted {
		t.Fatalf("approved, not started: %+v, %v", a, err)
	}
}

// TestTaskStop: a stopped task refuses new calls without recording or
// counting them (a plan too), its waiting calls end rejected at approval,
// another task goes on, and its count is never lowered; a runtime opened
// on the history keeps refusing.
func TestTaskStop(t *testing.T) {
	af := setupApprovals(t, nil)
	ctx := context.Background()
	waiting := park(t, af.rt, "5000")
	if err := af.rt.StopTask(ctx, "t-1", schema.StoppedByHost, "operator"); err != nil {
		t.Fatal(err)
	}
	if err := af.rt.StopTask(ctx, "t-1", schema.StoppedByHost, "again"); err != nil {
		t.Fatal(err)
	}
	before := af.budget.get("s-1", "t-1")
	_, err := af.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":1}`), worker.CallOptions{Task: "t-1"})
	if !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("call of a stopped task: %v", err)
	}
	plan := &schema.Plan{PlanID: "p-x", Session: "s-1", Task: "t-1", Tool: "payments.charge", PriorCallID: waiting.CallID}
	if _, err := af.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":5000}`), worker.CallOptions{Retry: plan}); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("plan of a stopped task: %v", err)
	}
	if got := af.log.types(); got != "tool.call,approval.requested,task.stopped,tool.result" {
		t.Fatalf("log: %s", got)
	}
	if r := af.log.all()[3].Result; r.CallID != waiting.CallID || r.Stage != schema.StageApproval {
		t.Fatalf("waiting call: %+v", r)
	}
	if af.budget.get("s-1", "t-1") != before || before != 1 {
		t.Fatalf("tool_calls %d, then %d", before, af.budget.get("s-1", "t-1"))
	}
	if _, err := af.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":1}`), worker.CallOptions{Task: "t-2"}); err != nil {
		t.Fatalf("another task: %v", err)
	}
	h := af.log.all()
	next := setup(t, chargeTool(), func(c *worker.Config) { reopen(c, af.cfg, h) })
	if _, err := next.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":1}`), worker.CallOptions{Task: "t-1"}); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("next owner: %v", err)
	}
	if _, err := recovery.PrepareRetry(schema.Events(h), waiting.CallID, nil); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("prepare: %v", err)
	}
}

// TestBudgetStopsTask: with StopExhaustedTasks, the call refused at stage
// budget stops its task; the next call is task_stopped.
func TestBudgetStopsTask(t *testing.T) {
	af := setupApprovals(t, func(c *worker.Config) { c.BudgetLimit, c.StopExhaustedTasks = 1, true })
	ctx := context.Background()
	call := func() error {
		_, err := af.rt.CallWithOptions(ctx, "payments.charge", json.RawMessage(`{"amount":1}`), worker.CallOptions{Task: "t-1"})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if err := call(); !errors.Is(err, schema.ErrRejected) {
		t.Fatalf("over budget: %v", err)
	}
	if err := call(); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("after: %v", err)
	}
	evs := af.log.all()
	last := evs[len(evs)-1]
	if last.Type != schema.TypeTaskStopped || last.Stop.By != schema.StoppedByBudget || af.budget.get("s-1", "t-1") != 2 {
		t.Fatalf("log %s, tool_calls %d", af.log.types(), af.budget.get("s-1", "t-1"))
	}
}
