// Package callreport writes what the commands that follow one call print:
// its result (jingwei call), a signed review of it and what follows from
// that (jingwei review), and its retry plan or why none is given (jingwei
// retry).
package callreport

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// WriteResult writes the tool.result event ev of the call of tool sent
// with requestID as an aligned two-column table.
func WriteResult(w io.Writer, ev schema.Event, requestID, tool string) {
	r := ev.Result
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session\t%s\n", ev.Session)
	fmt.Fprintf(tw, "request\t%s\n", requestID)
	fmt.Fprintf(tw, "call\t%s\n", r.CallID)
	fmt.Fprintf(tw, "tool\t%s\n", tool)
	status := string(r.Status)
	if r.Stage != "" {
		status += " at " + string(r.Stage)
	}
	if r.Retryable {
		status += " (retryable)"
	}
	fmt.Fprintf(tw, "status\t%s\n", status)
	if len(r.Output) > 0 {
		fmt.Fprintf(tw, "output\t%s\n", r.Output)
	}
	if r.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", r.Error)
	}
	tw.Flush()
}

// ResultError is the error of a result that is not ok: its status as the
// code.
func ResultError(ev *schema.Event) *schema.Error {
	r := ev.Result
	msg := fmt.Sprintf("call %s ended %s", r.CallID, r.Status)
	if r.Stage != "" {
		msg += " at stage " + string(r.Stage)
	}
	if r.Error != "" {
		msg += ": " + r.Error
	}
	return &schema.Error{Code: schema.Code(r.Status), Message: strings.TrimSpace(msg)}
}

// Review is what review prints with --json.
type Review struct {
	Review schema.Review `json:"review"`
	// Stream and Seq locate the published review in JW_REVIEWS.
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Assessment is the recovery worker's view of the call after the
	// review, when it answered.
	Assessment *schema.Assessment `json:"assessment,omitempty"`
	// Check is how the recovery worker judges this review (accepted, or
	// ignored and why), when it answered.
	Check *service.ReviewCheck `json:"check,omitempty"`
}

// NewReview is the Review of a published review's receipt.
func NewReview(rc service.ReviewReceipt) Review {
	return Review{Review: rc.Review, Stream: rc.Stream, Seq: rc.Seq, Assessment: rc.Assessment, Check: rc.Check}
}

// WriteReview writes a published review, how the recovery worker took it
// and what follows; inspectErr is why the recovery worker did not
// describe the call (nil when it did).
func WriteReview(w io.Writer, out Review, inspectErr error) {
	r := out.Review
	var a schema.Assessment
	if out.Assessment != nil {
		a = *out.Assessment
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "review\t%s of call %s in session %s\n", r.Verdict, r.CallID, r.Session)
	fmt.Fprintf(tw, "operator\t%s\n", r.Operator)
	fmt.Fprintf(tw, "evidence\t%s\n", r.Evidence)
	fmt.Fprintf(tw, "signer\t%s\n", r.Signer)
	fmt.Fprintf(tw, "published\t%s seq %d\n", out.Stream, out.Seq)
	if out.Check != nil {
		fmt.Fprintf(tw, "recovery worker\taccepted (signer trusted); a completed review is final, otherwise the latest accepted review decides the retry\n")
	}
	if out.Assessment != nil {
		fmt.Fprintf(tw, "call\t%s %s, %s (evidence %s, %d attempt(s))\n", a.Tool, a.Outcome, a.Decision, a.Evidence, a.Attempts)
		if recovery.WriterMayRun(a.Evidence) {
			fmt.Fprintf(tw, "writer\tmay still be running its body (evidence %s): a not_executed verdict holds only if its store was fenced, or the process is gone, before you checked (jingwei help review)\n", a.Evidence)
		}
	}
	tw.Flush()
	if inspectErr != nil {
		fmt.Fprintf(w, "\nthe recovery worker did not describe the call: %v\n", inspectErr)
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, ReviewNext(r, a))
}

// ReviewNext says what follows from a review of a call in assessment a.
func ReviewNext(r schema.Review, a schema.Assessment) string {
	retry := fmt.Sprintf("jingwei retry --session %s --call %s", r.Session, r.CallID)
	switch {
	case r.Verdict == schema.VerdictCompleted:
		return "verdict completed: every retry of this call will be refused (code completed); nothing more to do."
	case r.Verdict == schema.VerdictUncertain:
		return "verdict uncertain: the call stays needs_review until a review says not_executed or completed."
	case a.Decision == schema.DecisionRefuse:
		return "the call completed according to its log; no retry will be prepared whatever the review says."
	default:
		return "verdict not_executed: a retry may now be prepared:\n  " + retry
	}
}

// RetryHint says what to do after prepare refused a retry of call with
// code; "" when there is nothing to add.
func RetryHint(code, session, call string) string {
	switch code {
	case string(schema.CodeCompleted):
		return "the call is done; nothing will retry it and no result is invented"
	case string(schema.CodeNeedsReview):
		return fmt.Sprintf("a trusted reviewer must check the business system and sign a verdict:\n  jingwei review --session %s --call %s --verdict not_executed|completed|uncertain --evidence REF --operator NAME --key FILE", session, call)
	case string(schema.CodeInvalidReview):
		return "the review on file is not acceptable; sign a new one with a trusted key (jingwei review)"
	case "not_confirmed":
		return "the call is still open under a live lease; wait until its writer finishes or its lease expires, then ask again"
	case string(schema.CodeSupersededCall):
		return "the call has a later attempt; retry the latest one (see \"latest\" above, or jingwei status)"
	case "plan_consumed":
		return "the plan was already used by an attempt; look at that attempt with jingwei status"
	}
	return ""
}

// WritePlan writes a plan as an aligned two-column table.
func WritePlan(w io.Writer, p schema.Plan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "plan\t%s\n", p.PlanID)
	fmt.Fprintf(tw, "session\t%s\n", p.Session)
	fmt.Fprintf(tw, "task\t%s\n", p.Task)
	fmt.Fprintf(tw, "tool\t%s (%s, %s)\n", p.Tool, p.Contract.Effect, p.Contract.Revision)
	fmt.Fprintf(tw, "arguments\t%s\n", p.Arguments)
	fmt.Fprintf(tw, "key\t%s\n", p.Key)
	fmt.Fprintf(tw, "retries\t%s (seq %d)\n", p.PriorCallID, p.PriorSeq)
	fmt.Fprintf(tw, "basis\t%s\n", p.Basis)
	if p.Review != nil {
		fmt.Fprintf(tw, "review\t%s by %s, evidence %s\n", p.Review.Verdict, p.Review.Operator, p.Review.Evidence)
	}
	fmt.Fprintf(tw, "issued\t%s\n", p.IssuedAt.Format(time.RFC3339))
	tw.Flush()
}
