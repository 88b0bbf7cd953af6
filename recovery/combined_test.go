package recovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// combinedEv is callEv in the combined form (call.started, no start
// marker): the call and its start in one event.
func combinedEv(id string, eff effect.Effect) schema.Event {
	return with(callEv(id, eff, false), func(c *schema.Call) { c.Started = true })
}

// TestInspectCombinedForm: a call recorded as started in its tool.call is
// classified exactly as a marker call followed by tool.started: without a
// result uncertain with evidence no_result (retry_allowed when safe, else
// needs_review), with one by the result; and an older reader that drops
// the started member sees a marker-less call, which is uncertain too —
// never not_started.
func TestInspectCombinedForm(t *testing.T) {
	for _, tt := range []struct {
		name     string
		eff      effect.Effect
		tail     []schema.Event
		outcome  schema.Outcome
		evidence string
		decision schema.Decision
	}{
		{"no result idempotent", effect.Idempotent, []schema.Event{fencedEv()}, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionRetryAllowed},
		{"no result read_only, not fenced", effect.ReadOnly, nil, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionRetryAllowed},
		{"no result non_idempotent", effect.NonIdempotent, []schema.Event{fencedEv()}, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionNeedsReview},
		{"no result unknown", effect.Unknown, nil, schema.OutcomeUncertain, recovery.EvidenceNoResult, schema.DecisionNeedsReview},
		{"ok", effect.NonIdempotent, []schema.Event{resultEv("c-1", schema.StatusOK, "")}, schema.OutcomeCompleted, "ok", schema.DecisionRefuse},
		{"failed idempotent", effect.Idempotent, []schema.Event{resultEv("c-1", schema.StatusFailed, "")}, schema.OutcomeUncertain, "failed", schema.DecisionRetryAllowed},
		{"timeout non_idempotent", effect.NonIdempotent, []schema.Event{resultEv("c-1", schema.StatusTimeout, "")}, schema.OutcomeUncertain, "timeout", schema.DecisionNeedsReview},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evs := append([]schema.Event{combinedEv("c-1", tt.eff)}, tt.tail...)
			a, err := recovery.Inspect(hist(evs...), "c-1")
			if err != nil {
				t.Fatal(err)
			}
			if a.Outcome != tt.outcome || a.Evidence != tt.evidence || a.Decision != tt.decision {
				t.Fatalf("assessed %s/%s/%s, want %s/%s/%s", a.Outcome, a.Evidence, a.Decision, tt.outcome, tt.evidence, tt.decision)
			}
			// The same call in the three-event form gets the same answer.
			old := append([]schema.Event{callEv("c-1", tt.eff, true), startedEv("c-1")}, tt.tail...)
			b, err := recovery.Inspect(hist(old...), "c-1")
			if err != nil {
				t.Fatal(err)
			}
			if a.Outcome != b.Outcome || a.Evidence != b.Evidence || a.Decision != b.Decision {
				t.Fatalf("combined form %s/%s/%s, three-event form %s/%s/%s", a.Outcome, a.Evidence, a.Decision, b.Outcome, b.Evidence, b.Decision)
			}
			// A reader that ignores started sees a call without a start
			// marker: uncertain without a result, never not_started.
			if out, _, _ := recovery.Classify("", "", false, false, effect.Contract{Effect: tt.eff}); out != schema.OutcomeUncertain {
				t.Fatalf("a marker-less call without a result is %s to an older reader", out)
			}
		})
	}
}

// TestInspectCombinedFormCorrupt: what a call recorded as started cannot
// be followed by — a tool.started (started twice), an approval request or
// grant (its body may already have run), a rejection (it was admitted) —
// and a call that says both started and start_marker, each corrupt_history
// with a message naming the problem.
func TestInspectCombinedFormCorrupt(t *testing.T) {
	kp, _ := approverKey(t)
	for _, tt := range []struct {
		name string
		evs  []schema.Event
		want string
	}{
		{"tool.started after a combined call", []schema.Event{combinedEv("c-1", effect.Idempotent), startedEv("c-1"), resultEv("c-1", schema.StatusOK, "")}, "already recorded it started (started: true): tool.started twice"},
		{"approval.requested for a combined call", []schema.Event{combinedEv("c-1", effect.NonIdempotent), askedEv("c-1", 1)}, "approval.requested for call \"c-1\", whose tool.call recorded it admitted and started (started: true): its body may already have run"},
		{"approval.granted for a combined call", []schema.Event{combinedEv("c-1", effect.NonIdempotent), grantedEv(t, kp, "c-1", 1)}, "approval.granted for call \"c-1\", whose tool.call recorded it admitted and started"},
		{"rejected after a combined call", []schema.Event{combinedEv("c-1", effect.Idempotent), resultEv("c-1", schema.StatusRejected, schema.StageBudget)}, "rejected at stage budget, but its tool.call recorded it admitted and started"},
		{"started and start_marker", []schema.Event{with(combinedEv("c-1", effect.Idempotent), func(c *schema.Call) { c.StartMarker = true }), fencedEv()}, "call.started and call.start_marker are both true"},
		{"a second tool.started (three-event form, unchanged)", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), startedEv("c-1")}, "second tool.started for call"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := recovery.Inspect(hist(tt.evs...), "c-1")
			if !errors.Is(err, schema.ErrCorruptHistory) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Inspect: %v, want corrupt_history with %q", err, tt.want)
			}
		})
	}
}

// TestPrepareRetryCombinedChain: a retry chain mixing both forms is read
// as one chain, and planning a retry of a combined-form attempt rests on
// its classification (uncertain_safe for an idempotent call fenced without
// a result).
func TestPrepareRetryCombinedChain(t *testing.T) {
	first := combinedEv("c-1", effect.Idempotent)
	second := with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.StartMarker, c.Started = false, true })
	evs := []schema.Event{first, resultEv("c-1", schema.StatusFailed, ""), second, fencedEv()}
	a, err := recovery.Inspect(hist(evs...), "c-2")
	if err != nil {
		t.Fatal(err)
	}
	if a.Attempts != 2 || a.Outcome != schema.OutcomeUncertain || a.Evidence != recovery.EvidenceNoResult || a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("assessed %+v", a)
	}
	p, err := recovery.PrepareRetry(hist(evs...), "c-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Basis != schema.BasisUncertainSafe || p.PriorCallID != "c-2" || p.PriorSeq != 3 || p.Key != "op-1" {
		t.Fatalf("plan %+v", p)
	}
}
