package chaos

import (
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

// combined appends a first attempt in the combined form (call.started,
// no start marker): the call and its start in one event.
func (h *hist) combined(session, callID, tool, requestID, owner string, epoch uint64) {
	h.call(session, callID, tool, requestID, owner, epoch)
	c := h.s.Events[len(h.s.Events)-1].Event.Call
	c.StartMarker, c.Started = false, true
}

// TestWrongAssessmentsCombinedForm: the oracle reads a call recorded in
// the combined form as started: fenced without a result it is uncertain
// (no_result), so an assessment calling it not_started is wrong, and the
// right ones (uncertain by contract, completed with an ok result) are not.
func TestWrongAssessmentsCombinedForm(t *testing.T) {
	h := newHist()
	h.combined("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	h.fence("s1", 2)
	h.assess("s1", "c1", schema.OutcomeNotStarted, "not_started_marker", schema.DecisionRetryAllowed) // wrong: its body started
	h.combined("s1", "c2", tools.PaymentsCharge, "r2", "w2", 2)
	h.fence("s1", 3)
	h.assess("s1", "c2", schema.OutcomeUncertain, "no_result", schema.DecisionNeedsReview)
	h.combined("s1", "c3", tools.OrdersCreate, "r3", "w3", 3)
	h.fence("s1", 4)
	h.assess("s1", "c3", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed)
	h.combined("s1", "c4", tools.OrdersCreate, "r4", "w4", 4)
	h.result("s1", "c4", schema.StatusOK, "w4", 4)
	h.assess("s1", "c4", schema.OutcomeCompleted, "ok", schema.DecisionRefuse)
	r := rowOf(t, run(&facts{}, h), rowWrong)
	if r.Value != 1 || r.Met || len(r.Examples) != 1 || !strings.Contains(r.Examples[0], "s1/c1") {
		t.Fatalf("wrong assessments %v (%v), want 1: s1/c1", r.Value, r.Examples)
	}
}

// TestSnapshotIndexCombinedStart: the snapshot's index records a call in
// the combined form as started, as it does one with a tool.started.
func TestSnapshotIndexCombinedStart(t *testing.T) {
	h := newHist()
	h.combined("s1", "c1", tools.PaymentsCharge, "r1", "w1", 1)
	x := newIndex(&h.s)
	if ci := x.calls[callKey{"s1", "c1"}]; ci == nil || !ci.Started {
		t.Fatalf("snapshot index: %+v, want c1 started", ci)
	}
}
