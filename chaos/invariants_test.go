package chaos

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

// hist builds a crafted snapshot: every message one second after the one
// before, stream sequences in order.
type hist struct {
	s   snapshot
	seq uint64
	now time.Time
}

func newHist() *hist { return &hist{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)} }

func (h *hist) tick() (uint64, time.Time) {
	h.seq++
	h.now = h.now.Add(time.Second)
	return h.seq, h.now
}

// at moves the clock to t (for a kill between two messages).
func (h *hist) clock() time.Time { return h.now }

func (h *hist) event(owner string, ev schema.Event) {
	seq, t := h.tick()
	ev.V, ev.Seq, ev.At = 1, seq, t
	h.s.Events = append(h.s.Events, logEvent{Seq: seq, Time: t, Owner: owner, Event: ev})
}

func contract(tool string) effect.Contract {
	if tool == tools.OrdersCreate {
		return effect.Contract{Effect: effect.Idempotent, Revision: tools.OrdersRevision}
	}
	return effect.Contract{Effect: effect.NonIdempotent, Revision: tools.PaymentsRevision}
}

// call appends a first attempt of a request.
func (h *hist) call(session, callID, tool, requestID, owner string, epoch uint64) {
	h.event(owner, schema.Event{Session: session, Epoch: epoch, Type: schema.TypeCall, Call: &schema.Call{
		CallID: callID, Tool: tool, RequestID: requestID, StartMarker: true,
		Operation: &schema.Operation{Task: task, Key: "op-" + callID, Contract: contract(tool)}}})
}

// retry appends a retry of prior under plan.
func (h *hist) retry(session, callID, tool, prior, plan, owner string, epoch uint64) {
	h.event(owner, schema.Event{Session: session, Epoch: epoch, Type: schema.TypeCall, Call: &schema.Call{
		CallID: callID, Tool: tool, StartMarker: true,
		Operation: &schema.Operation{Task: task, Key: "op-" + prior, Contract: contract(tool),
			Retry: &schema.RetryLink{PriorCallID: prior, PlanID: plan, Basis: schema.BasisUncertainSafe}}}})
}

func (h *hist) started(session, callID, owner string, epoch uint64) {
	h.event(owner, schema.Event{Session: session, Epoch: epoch, Type: schema.TypeStarted, Started: &schema.Started{CallID: callID}})
}

func (h *hist) result(session, callID string, st schema.Status, owner string, epoch uint64) {
	r := &schema.Result{CallID: callID, Status: st}
	if st == schema.StatusRejected {
		r.Stage = schema.StageBudget
	}
	h.event(owner, schema.Event{Session: session, Epoch: epoch, Type: schema.TypeResult, Result: r})
}

func (h *hist) fence(session string, epoch uint64) {
	h.event("recoverer-x", schema.Event{Session: session, Epoch: epoch, Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: epoch, Owner: "recoverer-x"}})
}

func (h *hist) assess(session, callID string, o schema.Outcome, evidence string, d schema.Decision) {
	seq, t := h.tick()
	h.s.Assessments = append(h.s.Assessments, assessmentMsg{Seq: seq, Time: t, ID: "a." + session + "." + callID + "." + evidence,
		Assessment: schema.Assessment{Session: session, CallID: callID, Outcome: o, Evidence: evidence, Decision: d}})
}

func (h *hist) review(session, callID string, v schema.Verdict) {
	seq, t := h.tick()
	h.s.Reviews = append(h.s.Reviews, reviewMsg{Seq: seq, Time: t, Review: schema.Review{V: 1, Session: session, CallID: callID, Verdict: v}})
}

func (h *hist) plan(session, prior, planID string) {
	seq, t := h.tick()
	h.s.Plans = append(h.s.Plans, planMsg{Seq: seq, Time: t, Plan: schema.Plan{PlanID: planID, Session: session, PriorCallID: prior}})
}

func (h *hist) charge(session, callID, marker string) {
	seq, t := h.tick()
	h.s.Charges = append(h.s.Charges, chargeRecord{Seq: seq, Time: t, Session: session, CallID: callID, Account: marker, AmountCents: 100})
}

func (h *hist) order(key, marker string) {
	h.s.Orders = append(h.s.Orders, orderRecord{OrderID: "ord-" + key, Task: task, Key: key, Customer: marker})
}

func (h *hist) answer(session, requestID string) {
	seq, t := h.tick()
	h.s.Answers = append(h.s.Answers, answerMsg{Seq: seq, Time: t, Answer: schema.Answer{V: 1, Session: session, RequestID: requestID, Code: "unknown_tool"}})
}

// act is an acknowledged action of session s, request r, marker m.
func act(id, s, r, tool string) action {
	return action{ID: id, Marker: "m-" + id, Session: s, Task: task, Tool: tool, RequestID: r, Acked: true}
}

func rowOf(t *testing.T, rows []Row, name string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q", name)
	return Row{}
}

func run(f *facts, h *hist) []Row {
	if f.Bound == 0 {
		f.Bound, f.BoundText = 3*time.Second, "<= TTL+1s (3s)"
	}
	rows, _ := check(f, &h.s)
	return rows
}

// TestCleanHistoryHoldsEverything: a payment killed after its charge,
// assessed needs_review, reviewed completed; an order killed, retried by a
// plan, completed: every must row is 0 and met.
func TestCleanHistoryHoldsEverything(t *testing.T) {
	h := newHist()
	pay, ord := act("a1", "s1", "r1", tools.PaymentsCharge), act("a2", "s2", "r2", tools.OrdersCreate)
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.started("s1", "c1", "w1", 1)
	h.charge("s1", "c1", pay.Marker)
	h.call("s2", "c2", tools.OrdersCreate, "r2", "w1", 1)
	h.started("s2", "c2", "w1", 1)
	h.order("op-c2", ord.Marker)
	killAt := h.clock()
	h.fence("s1", 2)
	h.assess("s1", "c1", schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview)
	h.fence("s2", 2)
	h.assess("s2", "c2", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed)
	h.review("s1", "c1", schema.VerdictCompleted)
	h.plan("s2", "c2", "p-2")
	h.retry("s2", "c3", tools.OrdersCreate, "c2", "p-2", "w2", 3)
	h.started("s2", "c3", "w2", 3)
	h.result("s2", "c3", schema.StatusOK, "w2", 3)
	h.assess("s2", "c3", schema.OutcomeCompleted, "ok", schema.DecisionRefuse)
	f := &facts{Actions: []action{pay, ord}, Kills: []kill{{Owner: "w1", At: killAt}},
		Checkpoint: &checkpoint{Snap: &snapshot{}, Awaiting: map[callKey]bool{}}}
	rows := run(f, h)
	for _, r := range rows {
		if r.Must && (!r.Met || r.Value != 0) {
			t.Errorf("%s = %v (%v), want 0", r.Name, r.Value, r.Examples)
		}
	}
	if r := rowOf(t, rows, rowLatency+" p50"); r.Value != 2 || !r.Met {
		t.Errorf("latency p50 %v met %v, want 2s (kill → the first assessment two messages later)", r.Value, r.Met)
	}
}

func TestDuplicateOrders(t *testing.T) {
	h := newHist()
	a := act("a1", "s1", "r1", tools.OrdersCreate)
	h.order("op-1", a.Marker)
	h.order("op-2", a.Marker) // the same action placed under a second key
	h.order("op-3", "m-other")
	if r := rowOf(t, run(&facts{Actions: []action{a}}, h), rowDuplicateOrders); r.Value != 1 || r.Met {
		t.Errorf("duplicate orders %v, want 1: %+v", r.Value, r)
	}
	h2 := newHist()
	h2.order("op-1", "m-x")
	h2.order("op-1", "m-y") // one task + key, two records
	if r := rowOf(t, run(&facts{}, h2), rowDuplicateOrders); r.Value != 1 {
		t.Errorf("duplicate orders per key %v, want 1", r.Value)
	}
}

func TestDoubleCharges(t *testing.T) {
	pay := act("a1", "s1", "r1", tools.PaymentsCharge)
	zombie := func() *hist {
		// c1's worker is frozen before its charge; the reviewer finds no
		// charge, truthfully; the retry charges; then the frozen worker's
		// charge lands.
		h := newHist()
		h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
		h.started("s1", "c1", "w1", 1)
		h.fence("s1", 2)
		h.review("s1", "c1", schema.VerdictNotExecuted)
		h.retry("s1", "c2", tools.PaymentsCharge, "c1", "p-1", "w2", 3)
		h.started("s1", "c2", "w2", 3)
		h.charge("s1", "c2", pay.Marker)
		h.result("s1", "c2", schema.StatusOK, "w2", 3)
		h.charge("s1", "c1", pay.Marker)
		return h
	}
	rows := run(&facts{Actions: []action{pay}}, zombie())
	if r := rowOf(t, rows, rowDoubleCharges); r.Value != 1 || r.Met {
		t.Errorf("zombie: double charges %v, want 1", r.Value)
	}
	if r := rowOf(t, rows, rowLateEffects); r.Value != 1 {
		t.Errorf("zombie: late effects %v, want 1 (c1's charge after the fence)", r.Value)
	}
	if r := rowOf(t, rows, rowUntruthful); r.Value != 0 {
		t.Errorf("zombie: untruthful reviews %v, want 0", r.Value)
	}

	// A reviewer who said not_executed although the ledger held the
	// charge: the second charge is the reviewer's, not jingwei's.
	h := newHist()
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.started("s1", "c1", "w1", 1)
	h.charge("s1", "c1", pay.Marker)
	h.fence("s1", 2)
	h.review("s1", "c1", schema.VerdictNotExecuted)
	h.retry("s1", "c2", tools.PaymentsCharge, "c1", "p-1", "w2", 3)
	h.charge("s1", "c2", pay.Marker)
	rows = run(&facts{Actions: []action{pay}}, h)
	if r := rowOf(t, rows, rowDoubleCharges); r.Value != 0 {
		t.Errorf("untruthful review: double charges %v, want 0 (excused)", r.Value)
	}
	if r := rowOf(t, rows, rowUntruthful); r.Value != 1 || r.Met {
		t.Errorf("untruthful review: %v, want 1", r.Value)
	}

	// A re-published payment run twice: two charges, no review at all.
	h = newHist()
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.charge("s1", "c1", pay.Marker)
	h.call("s1", "c2", tools.PaymentsCharge, "r1", "w1", 1)
	h.charge("s1", "c2", pay.Marker)
	rows = run(&facts{Actions: []action{pay}}, h)
	if r := rowOf(t, rows, rowDoubleCharges); r.Value != 1 {
		t.Errorf("run twice: double charges %v, want 1", r.Value)
	}
	if r := rowOf(t, rows, rowRepublishedTwice); r.Value != 1 || r.Met {
		t.Errorf("run twice: re-published requests run twice %v, want 1", r.Value)
	}
}

func TestPlansUsedTwice(t *testing.T) {
	h := newHist()
	h.call("s1", "c1", tools.OrdersCreate, "r1", "w1", 1)
	h.retry("s1", "c2", tools.OrdersCreate, "c1", "p-1", "w2", 2)
	h.retry("s1", "c3", tools.OrdersCreate, "c1", "p-1", "w3", 3)
	if r := rowOf(t, run(&facts{}, h), rowPlansTwice); r.Value != 1 || r.Met || !strings.Contains(r.Examples[0], "p-1") {
		t.Errorf("plans used twice %+v, want p-1", r)
	}
}

func TestRepublishedRequestRetriesDoNotCount(t *testing.T) {
	h := newHist()
	h.call("s1", "c1", tools.OrdersCreate, "r1", "w1", 1)
	h.retry("s1", "c2", tools.OrdersCreate, "c1", "p-1", "w2", 2)
	// the same request id in another session is another request
	h.call("s2", "c3", tools.OrdersCreate, "r1", "w1", 1)
	if r := rowOf(t, run(&facts{}, h), rowRepublishedTwice); r.Value != 0 {
		t.Errorf("re-published run twice %v, want 0", r.Value)
	}
}

func TestAckedLost(t *testing.T) {
	h := newHist()
	lost := act("a1", "s1", "r1", tools.OrdersCreate)
	answered := act("a2", "s1", "r2", tools.OrdersCreate)
	notAcked := act("a3", "s1", "r3", tools.OrdersCreate)
	notAcked.Acked = false
	recorded := act("a4", "s1", "r4", tools.OrdersCreate)
	h.answer("s1", "r2")
	h.call("s1", "c4", tools.OrdersCreate, "r4", "w1", 1)
	r := rowOf(t, run(&facts{Actions: []action{lost, answered, notAcked, recorded}}, h), rowAckedLost)
	if r.Value != 1 || r.Met || r.Examples[0] != "s1/r1" {
		t.Errorf("acked lost %+v, want s1/r1 only", r)
	}
}

func TestUnassessedCalls(t *testing.T) {
	h := newHist()
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1) // open, never assessed
	h.call("s1", "c2", tools.PaymentsCharge, "r2", "w1", 1)
	h.result("s1", "c2", schema.StatusOK, "w1", 1) // closed, never assessed
	h.call("s1", "c3", tools.PaymentsCharge, "r3", "w1", 1)
	h.result("s1", "c3", schema.StatusOK, "w1", 1)
	h.assess("s1", "c3", schema.OutcomeCompleted, "ok", schema.DecisionRefuse)
	rows := run(&facts{}, h)
	if r := rowOf(t, rows, rowOpenUnassessed); r.Value != 1 || !strings.HasPrefix(r.Examples[0], "s1/c1 (written by w1; never fenced)") {
		t.Errorf("open unassessed %+v", r)
	}
	if r := rowOf(t, rows, rowClosedUnassessed); r.Value != 1 || r.Examples[0] != "s1/c2" {
		t.Errorf("closed unassessed %+v", r)
	}
}

func TestAssessmentsRepeatedIsReported(t *testing.T) {
	h := newHist()
	h.call("s1", "c1", tools.OrdersCreate, "r1", "w1", 1)
	h.result("s1", "c1", schema.StatusOK, "w1", 1)
	for range 3 {
		h.assess("s1", "c1", schema.OutcomeCompleted, "ok", schema.DecisionRefuse)
	}
	r := rowOf(t, run(&facts{}, h), rowRepeated)
	if r.Value != 2 || r.Met || r.Must {
		t.Errorf("repeated %+v, want 2 extra, reported only", r)
	}
}

func TestWrongAssessments(t *testing.T) {
	h := newHist()
	// A truncated read: the ok result is on the log before the fence, the
	// assessment says no result.
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.started("s1", "c1", "w1", 1)
	h.result("s1", "c1", schema.StatusOK, "w1", 1)
	h.fence("s1", 2)
	h.assess("s1", "c1", schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview)
	// Not started although the body started.
	h.call("s1", "c2", tools.OrdersCreate, "r2", "w1", 2)
	h.started("s1", "c2", "w1", 2)
	h.fence("s1", 3)
	h.assess("s1", "c2", schema.OutcomeNotStarted, "not_started_marker", schema.DecisionRetryAllowed)
	// The wrong decision for the contract.
	h.call("s1", "c3", tools.PaymentsCharge, "r3", "w2", 3)
	h.started("s1", "c3", "w2", 3)
	h.fence("s1", 4)
	h.assess("s1", "c3", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed)
	// An assessment of a call nobody recorded.
	h.assess("s1", "c-ghost", schema.OutcomeCompleted, "ok", schema.DecisionRefuse)
	// Right ones.
	h.call("s1", "c4", tools.PaymentsCharge, "r4", "w3", 4)
	h.result("s1", "c4", schema.StatusRejected, "w3", 4)
	h.assess("s1", "c4", schema.OutcomeNotStarted, "rejected:budget", schema.DecisionRetryAllowed)
	h.call("s1", "c5", tools.OrdersCreate, "r5", "w3", 4)
	h.result("s1", "c5", schema.StatusFailed, "w3", 4)
	h.assess("s1", "c5", schema.OutcomeUncertain, "failed", schema.DecisionRetryAllowed)
	h.call("s1", "c6", tools.PaymentsCharge, "r6", "w3", 4)
	h.fence("s1", 5)
	h.assess("s1", "c6", schema.OutcomeNotStarted, "not_started_marker", schema.DecisionRetryAllowed)
	r := rowOf(t, run(&facts{}, h), rowWrong)
	if r.Value != 4 || r.Met {
		t.Fatalf("wrong assessments %v, want 4: %v", r.Value, r.Examples)
	}
	for i, want := range []string{"s1/c1", "s1/c2", "s1/c3", "c-ghost"} {
		if !strings.Contains(r.Examples[i], want) {
			t.Errorf("example %d %q, want %s", i, r.Examples[i], want)
		}
	}
}

func TestReviewMissingFromStatus(t *testing.T) {
	cp := newHist()
	cp.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1) // needs_review, listed
	cp.started("s1", "c1", "w1", 1)
	cp.call("s2", "c2", tools.PaymentsCharge, "r2", "w1", 1) // needs_review, forgotten
	cp.started("s2", "c2", "w1", 1)
	cp.call("s3", "c3", tools.PaymentsCharge, "r3", "w1", 1) // reviewed already: not expected
	cp.started("s3", "c3", "w1", 1)
	cp.call("s4", "c4", tools.PaymentsCharge, "r4", "w1", 1) // still running: not expected
	cp.started("s4", "c4", "w1", 1)
	cp.call("s5", "c5", tools.OrdersCreate, "r5", "w1", 1) // retry_allowed: not expected
	cp.started("s5", "c5", "w1", 1)
	for _, s := range []string{"s1", "s2", "s3", "s5"} {
		cp.fence(s, 2)
	}
	cp.assess("s2", "c2", schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview)
	cp.review("s3", "c3", schema.VerdictNotExecuted)
	f := &facts{Checkpoint: &checkpoint{Snap: &cp.s, Awaiting: map[callKey]bool{{"s1", "c1"}: true}}}
	r := rowOf(t, run(f, newHist()), rowReviewMissing)
	if r.Value != 1 || r.Met || r.Examples[0] != "s2/c2" || !strings.Contains(r.Note, "1 of the missing had a needs_review assessment") {
		t.Errorf("missing from status %+v, want s2/c2", r)
	}
	f.Checkpoint.Err = "no_service"
	if r := rowOf(t, run(f, newHist()), rowReviewMissing); r.Met || !math.IsNaN(r.Value) {
		t.Errorf("status not asked: %+v, want unmet, no value", r)
	}
}

func TestStuckActions(t *testing.T) {
	h := newHist()
	stuck := act("a1", "s1", "r1", tools.PaymentsCharge)
	refused := act("a2", "s2", "r2", tools.PaymentsCharge)
	retried := act("a3", "s3", "r3", tools.OrdersCreate)
	h.call("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.started("s1", "c1", "w1", 1)
	h.fence("s1", 2)
	h.call("s2", "c2", tools.PaymentsCharge, "r2", "w1", 1)
	h.started("s2", "c2", "w1", 1)
	h.fence("s2", 2)
	h.review("s2", "c2", schema.VerdictCompleted)
	h.call("s3", "c3", tools.OrdersCreate, "r3", "w1", 1)
	h.retry("s3", "c4", tools.OrdersCreate, "c3", "p-3", "w2", 2)
	h.result("s3", "c4", schema.StatusOK, "w2", 2)
	f := &facts{Actions: []action{stuck, refused, retried}, HostNotes: map[string]string{"a1": "plan_consumed"}}
	r := rowOf(t, run(f, h), rowStuck)
	if r.Value != 1 || r.Met || !strings.Contains(r.Examples[0], "s1/r1") || !strings.Contains(r.Examples[0], "plan_consumed") {
		t.Errorf("stuck %+v, want s1/r1 with the host's last answer", r)
	}
}

func TestLatency(t *testing.T) {
	h := newHist()
	h.call("s1", "c1", tools.OrdersCreate, "r1", "w1", 1)
	h.call("s2", "c2", tools.OrdersCreate, "r2", "w1", 1)
	h.assess("s2", "c2", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // before the kill: not counted
	killAt := h.clock().Add(500 * time.Millisecond)
	h.call("s3", "c3", tools.OrdersCreate, "r3", "w2", 1) // another worker's
	h.fence("s1", 2)
	h.tick()
	h.tick()
	h.assess("s1", "c1", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // kill + 4.5 s
	h.assess("s1", "c1", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // not the first
	h.assess("s3", "c3", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed)
	f := &facts{Kills: []kill{{Owner: "w1", At: killAt}}, Bound: 3 * time.Second, BoundText: "<= 3s"}
	rows, lat := check(f, &h.s)
	if lat.Samples != 1 || lat.Max != 4.5 {
		t.Errorf("latency %+v, want one sample of 4.5s", lat)
	}
	// The sample splits at the fence that closed the call: 1.5 s to the
	// fence, 3 s from it to the assessment.
	if c, a := lat.CrashToFence, lat.FenceToAssessment; c.Samples != 1 || c.Max != 1.5 || a.Samples != 1 || a.Max != 3 {
		t.Errorf("crash -> fence %+v, fence -> assessment %+v, want one sample each of 1.5s and 3s", c, a)
	}
	if r := rowOf(t, rows, rowLatency+" p99"); r.Met || r.Must || r.Value != 4.5 {
		t.Errorf("p99 row %+v, want 4.5s, unmet, reported", r)
	}
	if r := rowOf(t, rows, rowLatency+" max"); len(r.Examples) != 1 || !strings.HasPrefix(r.Examples[0], "s1/c1 4.500s (w1 killed at 10:00:03.500; fence +1.500s by recoverer-x, assessment +3.000s after it)") {
		t.Errorf("max row examples %q, want s1/c1 with its split at the fence", r.Examples)
	}
}

func TestExpectedFollowsTheDecisionTable(t *testing.T) {
	pay, ord := &schema.Call{CallID: "c", StartMarker: true, Operation: &schema.Operation{Contract: contract(tools.PaymentsCharge)}},
		&schema.Call{CallID: "c", StartMarker: true, Operation: &schema.Operation{Contract: contract(tools.OrdersCreate)}}
	legacy := &schema.Call{CallID: "c"} // no operation: unknown effect, no start marker
	for _, tt := range []struct {
		name string
		ci   callInfo
		o    schema.Outcome
		e    string
		d    schema.Decision
	}{
		{"ok", callInfo{Call: pay, Started: true, Result: &schema.Result{Status: schema.StatusOK}}, schema.OutcomeCompleted, "ok", schema.DecisionRefuse},
		{"rejected", callInfo{Call: pay, Result: &schema.Result{Status: schema.StatusRejected, Stage: schema.StageGuard}}, schema.OutcomeNotStarted, "rejected:guard", schema.DecisionRetryAllowed},
		{"marker, not started", callInfo{Call: pay}, schema.OutcomeNotStarted, "not_started_marker", schema.DecisionRetryAllowed},
		{"started, no result, payment", callInfo{Call: pay, Started: true}, schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview},
		{"started, no result, order", callInfo{Call: ord, Started: true}, schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed},
		{"no marker", callInfo{Call: legacy}, schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview},
		{"timeout, order", callInfo{Call: ord, Started: true, Result: &schema.Result{Status: schema.StatusTimeout}}, schema.OutcomeUncertain, "timeout", schema.DecisionRetryAllowed},
		{"cancelled, payment", callInfo{Call: pay, Started: true, Result: &schema.Result{Status: schema.StatusCancelled}}, schema.OutcomeUncertain, "cancelled", schema.DecisionNeedsReview},
	} {
		o, e, d := expected(&tt.ci)
		if o != tt.o || e != tt.e || d != tt.d {
			t.Errorf("%s: %s/%s/%s, want %s/%s/%s", tt.name, o, e, d, tt.o, tt.e, tt.d)
		}
	}
}

func TestUnionLength(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		ivs  [][2]time.Time
		want time.Duration
	}{
		{nil, 0},
		{[][2]time.Time{{at(1), at(3)}}, 2 * time.Second},
		// Four streams' windows after one node kill, overlapping: counted once.
		{[][2]time.Time{{at(6.1), at(11.2)}, {at(6.1), at(11.5)}, {at(6.1), at(14.5)}, {at(6.1), at(11.3)}}, 8400 * time.Millisecond},
		// Disjoint windows add up, in any order.
		{[][2]time.Time{{at(34.5), at(42.6)}, {at(30.3), at(32.9)}, {at(34.6), at(39.3)}}, 10700 * time.Millisecond},
		// One window inside another.
		{[][2]time.Time{{at(1), at(10)}, {at(2), at(3)}}, 9 * time.Second},
	}
	for i, c := range cases {
		if got := unionLength(c.ivs); (got - c.want).Abs() > time.Millisecond {
			t.Errorf("case %d: union %v, want %v", i, got, c.want)
		}
	}
}
