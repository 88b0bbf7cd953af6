package recoverer

import (
	"encoding/json"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/testhistory"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestIncrementalMatchesInspect feeds generated histories (every status,
// rejections, retries, takeovers, unknown event types) through the
// incremental classifier and checks each assessment it builds equals
// recovery.Inspect's on the history as it stood at that event.
func TestIncrementalMatchesInspect(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		h := testhistory.Generate(testhistory.Config{Session: "s-gen", Events: 600, Seed: seed})
		tr := newTracker()
		var fast, loaded int
		for i, ev := range h.Events {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			found, err := tr.observe("s-gen", ev.Seq, b, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				want, err := recovery.Inspect(schema.Events(h.Events[:i+1]), f.callID)
				if f.a == nil {
					loaded++
					continue // a retry or an unknown call: Inspect is what runs
				}
				fast++
				if err != nil {
					t.Fatalf("seed %d seq %d: Inspect(%s): %v", seed, ev.Seq, f.callID, err)
				}
				assertSame(t, *f.a, want)
			}
		}
		if fast == 0 || loaded == 0 {
			t.Fatalf("seed %d: %d incremental and %d loaded assessments; the generator should give both", seed, fast, loaded)
		}
		seen, open := tr.counts()
		if seen != uint64(len(h.Events)) || open > 1 {
			t.Fatalf("seed %d: seen %d of %d events, %d calls still tracked", seed, seen, len(h.Events), open)
		}
	}
}

// TestVerdictTable is the decision table of DESIGN §2 as the incremental
// classifier applies it.
func TestVerdictTable(t *testing.T) {
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
		out, ev, dec := verdict(tc.status, tc.stage, tc.marker, tc.started, tc.c)
		if out != tc.out || ev != tc.ev || dec != tc.dec {
			t.Errorf("%+v: got %s/%s/%s", tc, out, ev, dec)
		}
	}
}
