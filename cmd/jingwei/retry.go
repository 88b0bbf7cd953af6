package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/callreport"
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
			if hint := callreport.RetryHint(string(code), *session, *call); hint != "" {
				fmt.Fprintf(stderr, "jingwei retry: refused (%s): %s\n", code, hint)
			}
		}
		return st
	}
	if *asJSON {
		_ = writeJSON(stdout, plan)
		return exitOK
	}
	callreport.WritePlan(stdout, plan)
	fmt.Fprintf(stdout, "\nthe plan is single-use; a tool worker that owns session %s runs the retry with key %s\n", plan.Session, plan.Key)
	return exitOK
}
