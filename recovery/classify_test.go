package recovery_test

import (
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestClassify is the decision table of docs/protocol.md §9 as Classify applies it
// (Inspect and the recovery worker's incremental classifier both use it).
func TestClassify(t *testing.T) {
	idem := effect.Contract{Effect: effect.Idempotent, Revision: "v"}
	nonIdem := effect.Contract{Effect: effect.NonIdempotent, Revision: "v"}
	for _, tc := range []struct {
		status          schema.Status
		stage           schema.Stage
		marker, started bool
		c               effect.Contract
		out             schema.Outcome
		ev              string
		dec             schema.Decision
	}{
		{schema.StatusOK, "", true, true, nonIdem, schema.OutcomeCompleted, "ok", schema.DecisionRefuse},
		{schema.StatusRejected, schema.StageBudget, true, false, nonIdem, schema.OutcomeNotStarted, "rejected:budget", schema.DecisionRetryAllowed},
		{"", "", true, false, nonIdem, schema.OutcomeNotStarted, recovery.EvidenceNotStartedMarker, schema.DecisionRetryAllowed},
		{"", "", true, true, nonIdem, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionNeedsReview},
		{"", "", false, false, nonIdem, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionNeedsReview},
		{"", "", false, false, idem, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionRetryAllowed},
		{schema.StatusBudgetExhausted, "", true, true, idem, schema.OutcomeUncertain, "budget_exhausted", schema.DecisionRetryAllowed},
		{schema.StatusFailed, "", true, true, effect.Contract{Revision: "v"}, schema.OutcomeUncertain, "failed", schema.DecisionNeedsReview},
	} {
		out, ev, dec := recovery.Classify(tc.status, tc.stage, tc.marker, tc.started, tc.c)
		if out != tc.out || ev != tc.ev || dec != tc.dec {
			t.Errorf("%+v: got %s/%s/%s", tc, out, ev, dec)
		}
	}
}
