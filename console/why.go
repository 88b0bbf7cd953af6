package console

import (
	"fmt"
	"strings"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// why says, for a person, why the recovery worker assessed a call as it
// did: the fact the assessment rests on (its evidence) and the rule of the
// decision table that applies to the tool's contract.
func why(a schema.Assessment) string {
	fact := evidenceText(a.Evidence)
	switch {
	case a.Outcome == schema.OutcomeCompleted:
		return fact + " The call took effect: no retry will be prepared, and no result is invented."
	case a.Outcome == schema.OutcomeNotStarted:
		return fact + " The body never ran: a new attempt may be prepared; it passes every admission check again."
	case a.Decision == schema.DecisionRetryAllowed:
		return fmt.Sprintf("%s It may or may not have taken effect, but the tool is %s (contract %s): one retry with the same operation key is safe, the tool deduplicates it.",
			fact, effectText(a.Contract.Effect), a.Contract.Revision)
	case a.Decision == schema.DecisionNeedsReview:
		return fmt.Sprintf("%s It may or may not have taken effect, and the tool is %s (contract %s): a blind retry could repeat its side effect. "+
			"Check the business system, then sign: not_executed allows one retry, completed refuses any retry for good, uncertain changes nothing.",
			fact, effectText(a.Contract.Effect), a.Contract.Revision)
	}
	return fact
}

// evidenceText says what an assessment's evidence means.
func evidenceText(ev string) string {
	switch {
	case ev == "ok":
		return "The latest attempt ended ok."
	case ev == "no_result":
		return "The latest attempt has no result: its writer stopped (killed, or its lease lost) and the session was fenced, so no result can arrive any more."
	case ev == "not_started_marker":
		return "The latest attempt was recorded with a start marker but has no tool.started: the runtime never started its body."
	case strings.HasPrefix(ev, "rejected:"):
		return fmt.Sprintf("Admission refused the latest attempt at stage %s, before its body started.", strings.TrimPrefix(ev, "rejected:"))
	case ev == string(schema.StatusFailed):
		return "The latest attempt failed: the body returned an error, which does not prove it had no effect."
	case ev == string(schema.StatusTimeout):
		return "The latest attempt ran past its timeout."
	case ev == string(schema.StatusCancelled):
		return "The latest attempt was cancelled while its body ran."
	case ev == string(schema.StatusBudgetExhausted):
		return "The latest attempt ran out of a budget of its own part way."
	case ev == string(schema.StatusOutputLimit):
		return "The latest attempt's output was over the tool's limit and was not stored."
	}
	return fmt.Sprintf("The latest attempt's evidence is %q.", ev)
}

// effectText names an effect for a person.
func effectText(e effect.Effect) string {
	switch e {
	case effect.ReadOnly:
		return "read-only"
	case effect.Idempotent:
		return "idempotent"
	case effect.NonIdempotent:
		return "not idempotent"
	}
	return "of unknown effect (treated as not idempotent)"
}

// refusalHint says what a reviewer can do after prepare refused a plan
// with code.
func refusalHint(code schema.Code) string {
	switch code {
	case schema.CodeCompleted:
		return "The call is done (its log, or a trusted completed review, says so): nothing will retry it, and no result is invented."
	case schema.CodeNeedsReview:
		return "A trusted reviewer must check the business system and sign not_executed before a retry can be prepared."
	case schema.CodeInvalidReview:
		return "The review on record is not acceptable; sign a new one with a key the recovery worker trusts."
	case schema.CodeNotConfirmed:
		return "The call is still open under a live lease: its writer may still finish it. Ask again once the lease expired."
	case schema.CodeSupersededCall:
		return "The call has a later attempt; that one is the call to decide on."
	case schema.CodePlanConsumed:
		return "The plan was already used by an attempt: see the call's chain."
	}
	return ""
}

// reviewHint says what follows from an accepted review.
func reviewHint(v schema.Verdict) string {
	switch v {
	case schema.VerdictCompleted:
		return "completed is final: every retry of this call will be refused (code completed)."
	case schema.VerdictUncertain:
		return "The call stays needs_review until a review says not_executed or completed."
	}
	return "A retry may now be prepared: ask for the retry plan."
}
