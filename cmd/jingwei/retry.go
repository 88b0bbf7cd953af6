package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

func init() {
	register(command{name: "retry", summary: "ask the recovery worker for a retry plan for one call", run: runRetry})
}

const retryHelp = `  jingwei retry --session S --call C [--json]

Asks the recovery worker (jw.api.prepare) for a single-use retry plan for the
latest attempt of a call. The worker loads the confirmed session history,
applies the decision table (docs/protocol.md §9) and the latest valid signed review, and
issues the plan exactly once (jw_plans, then jw.plans.<session>); asking again
returns the same plan. A tool worker that owns the session then runs the retry
with the call's operation key, so an idempotent tool deduplicates it. Every
admission check runs again for the retry.

Output: the plan (plan id, basis, key, prior call); --json prints it as one
JSON object (docs/protocol.md §5 "Plan").

Exit status:
  0  a plan was issued (or had been issued before and is still unused)
  1  unexpected failure: no service answers
  4  unreachable: the server did not accept the connection within 2 s
  2  usage: a missing or bad flag
  3  refused: {"error":{"code":…,"message":…}} on stdout; the codes and what to
     do next:
       completed       the call completed (or a review says so): nothing to retry
       needs_review    an unknown/non-idempotent call: a reviewer must first sign
                       verdict not_executed with 'jingwei review'
       invalid_review  the latest review is not acceptable (see the message)
       not_confirmed   the call is still running under a live lease: wait
       superseded_call the call has a later attempt: retry that one ("latest")
       plan_consumed   the call's plan was already used: inspect its retry
       permission_denied  the credentials may not ask for plans (role host),
                       reported at once
       unknown_call, legacy_call, corrupt_history, history_too_large,
       field_too_long  the history does not allow a plan (docs/protocol.md §9)`

// retryHint says what to do after a refusal of prepare.
func retryHint(code, session, call string) string {
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

func runRetry(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("retry", "Ask the recovery worker for a retry plan for one call.", retryHelp, stderr)
	var cf clientFlags
	cf.register(fs, 30*time.Second)
	session := fs.String("session", "", "session id (required)")
	call := fs.String("call", "", "call id: the latest attempt of its chain (required)")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if err := stream.ValidateSession(*session); err != nil {
		return usageError(stderr, "retry", "--session: %v", err)
	}
	if *call == "" {
		return usageError(stderr, "retry", "--call is required")
	}
	if _, err := cf.log.logger(stderr); err != nil {
		return usageError(stderr, "retry", "%v", err)
	}
	api, err := cf.connect(ctx, "retry", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()

	plan, err := api.Prepare(ctx, *session, *call)
	if err != nil {
		st := printError(stdout, err)
		if code := schema.CodeOf(err); code != "" {
			if hint := retryHint(string(code), *session, *call); hint != "" {
				fmt.Fprintf(stderr, "jingwei retry: refused (%s): %s\n", code, hint)
			}
		}
		return st
	}
	if *asJSON {
		_ = writeJSON(stdout, plan)
		return exitOK
	}
	printPlan(stdout, plan)
	fmt.Fprintf(stdout, "\nthe plan is single-use; a tool worker that owns session %s runs the retry with key %s\n", plan.Session, plan.Key)
	return exitOK
}

// printPlan prints a plan as an aligned two-column table.
func printPlan(w io.Writer, p schema.Plan) {
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
