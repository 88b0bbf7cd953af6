package recovery_test

import (
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// FuzzInspect feeds arbitrary JSON Lines through the reader into Inspect,
// PrepareRetry and VerifyRetries. None may panic, and they must agree: a
// history error of Inspect is PrepareRetry's error too (with or without
// RequireSignedPlans), and an assessment's decision is what PrepareRetry
// does without a review (refuse → completed, needs_review → needs_review,
// retry_allowed → a plan) and with a not_executed review. With no trusted
// planner, a chain with a retry is unauthorized_retry, and a chain without
// one plans as without the option.
func FuzzInspect(f *testing.F) {
	for _, c := range loadFixtures(f) {
		f.Add(c.historyBytes(f), c.Call)
	}
	chain := []schema.Event{
		callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, ""),
		retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusRejected, schema.StageBudget),
		fencedEv(),
	}
	f.Add(jsonl(f, chain...), "c-2")
	f.Add(jsonl(f, chain...), "c-1")
	g, last := genHistory(nil, 40)
	f.Add(g, last)

	f.Fuzz(func(t *testing.T, data []byte, callID string) {
		a, errI := recovery.Inspect(reader(data), callID)
		p, errP := recovery.PrepareRetry(reader(data), callID, nil)
		_, errS := recovery.PrepareRetry(reader(data), callID, nil, recovery.RequireSignedPlans(nil, nil))
		errV := recovery.VerifyRetries(reader(data), nil, nil)
		if errI != nil {
			code := schema.CodeOf(errI)
			if code == "" {
				t.Fatalf("Inspect: uncoded error %v", errI)
			}
			if schema.CodeOf(errP) != code || schema.CodeOf(errS) != code {
				t.Fatalf("Inspect: %v; PrepareRetry: %v; with RequireSignedPlans: %v", errI, errP, errS)
			}
			return
		}
		if a.Attempts > 1 {
			if schema.CodeOf(errS) != schema.CodeUnauthorizedRetry || schema.CodeOf(errV) != schema.CodeUnauthorizedRetry {
				t.Fatalf("a retry with no trusted planner: PrepareRetry %v, VerifyRetries %v", errS, errV)
			}
		} else if schema.CodeOf(errS) != schema.CodeOf(errP) {
			t.Fatalf("first attempt: PrepareRetry %v, with RequireSignedPlans %v", errP, errS)
		}
		n := len(a.Chain)
		if a.CallID != callID || a.Attempts != n || n == 0 || a.Chain[n-1] != callID {
			t.Fatalf("assessment %+v for call %q", a, callID)
		}
		switch {
		case (a.Outcome == schema.OutcomeCompleted) != (a.Decision == schema.DecisionRefuse),
			(a.Outcome == schema.OutcomeCompleted) != (a.Evidence == "ok"),
			a.Decision == schema.DecisionNeedsReview && (a.Outcome != schema.OutcomeUncertain || a.Contract.Effect.Safe()):
			t.Fatalf("assessment breaks the decision table: %+v", a)
		}
		// A stopped task's calls are classified but never planned (§17).
		var evs []schema.Event
		for ev, err := range reader(data) {
			if err == nil {
				evs = append(evs, ev)
			}
		}
		if _, stopped := recovery.ApprovalsOf(evs).Stopped[a.Task]; stopped {
			rev := &schema.Review{V: 1, Session: a.Session, CallID: callID, Operator: "fuzz", Verdict: schema.VerdictNotExecuted}
			_, errR := recovery.PrepareRetry(reader(data), callID, rev)
			if schema.CodeOf(errP) != schema.CodeTaskStopped || schema.CodeOf(errR) != schema.CodeTaskStopped {
				t.Fatalf("call of a stopped task: PrepareRetry %v, with a review %v", errP, errR)
			}
			return
		}
		want := map[schema.Decision]schema.Code{schema.DecisionRefuse: schema.CodeCompleted, schema.DecisionNeedsReview: schema.CodeNeedsReview}[a.Decision]
		if schema.CodeOf(errP) != want || (want == "" && errP != nil) {
			t.Fatalf("decision %s, PrepareRetry: %v", a.Decision, errP)
		}
		if want == "" {
			checkPlan(t, a, p)
		}
		rev := &schema.Review{V: 1, Session: a.Session, CallID: callID, Operator: "fuzz", Verdict: schema.VerdictNotExecuted}
		p, errP = recovery.PrepareRetry(reader(data), callID, rev)
		switch {
		case a.Decision == schema.DecisionRefuse:
			if schema.CodeOf(errP) != schema.CodeCompleted {
				t.Fatalf("completed call with review: %v", errP)
			}
		case errP != nil:
			t.Fatalf("decision %s with a not_executed review: %v", a.Decision, errP)
		default:
			checkPlan(t, a, p)
			if (p.Basis == schema.BasisReviewedNotExecuted) != (a.Decision == schema.DecisionNeedsReview) {
				t.Fatalf("basis %s for decision %s", p.Basis, a.Decision)
			}
		}
	})
}

func checkPlan(t *testing.T, a schema.Assessment, p schema.Plan) {
	t.Helper()
	d, err := schema.ArgsDigest(p.Arguments)
	if err != nil || d != p.ArgsDigest {
		t.Fatalf("plan digest %s of %s: %s, %v", p.ArgsDigest, p.Arguments, d, err)
	}
	if p.PriorCallID != a.CallID || p.Key != a.Key || p.Task != a.Task || p.Tool != a.Tool || p.Contract != a.Contract ||
		p.Session != a.Session || p.PlanID != recovery.PlanID(a.Session, a.CallID) {
		t.Fatalf("plan %+v does not match assessment %+v", p, a)
	}
	if (p.Basis == schema.BasisNotStarted) != (a.Outcome == schema.OutcomeNotStarted) {
		t.Fatalf("basis %s for outcome %s", p.Basis, a.Outcome)
	}
}
