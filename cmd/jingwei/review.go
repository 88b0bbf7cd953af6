package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/callreport"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

func init() {
	register(command{name: "review", summary: "sign and publish a review of an uncertain call", run: runReview})
}

const reviewHelp = `  jingwei review --session S --call C --verdict not_executed|completed|uncertain
                 --evidence REF --operator NAME --key FILE [--json]

Signs a review (docs/protocol.md §5 "Review") with a reviewer nkey (--key, a seed file
made by 'jingwei keys new'; 'jingwei serve' makes one in its data directory)
and publishes it on jw.reviews.<session>, waiting for JetStream's
acknowledgement. Then it asks the recovery worker what the call's state is
and prints it.

Check the business system before you sign: a review is a trusted statement,
never a guess.

Before you sign not_executed: a call assessed after a fence (no_result, a
takeover) was written by a tool worker that can no longer append to the
log, but whose body MAY STILL BE RUNNING (a frozen or paused process resumes
and carries on). "No effect yet" is not "no effect", so, in this order:
  1. stop the old writer from landing the effect: raise the fence of what the
     call writes to the session's latest epoch (the example tools' ledger:
     jingwei fence --session S; in Go tools.Tools.FenceLedger; see
     docs/tool-authors.md), or confirm that the
     process that ran the call is gone (killed, not just unreachable), or that
     the external system deduplicates on the call's operation key;
  2. only then look for the effect, by call id and by operation key (the
     example ledger: jingwei ledger --session S --call C);
  3. sign completed if you found it, not_executed if not, uncertain if you
     could not do step 1 (docs/protocol.md §10).

  not_executed  the call had no effect: a retry may be prepared ('jingwei retry')
  completed     the call took effect: no retry will ever be prepared for it, and
                no result is invented
  uncertain     you cannot tell: the call stays needs_review

The recovery worker accepts only reviews signed by a key in its trusted
reviewers (recover --trust-reviewers); others are rejected, logged and
change nothing. A trusted completed review is final: a later review of the
call with another verdict is rejected (review_conflict) and logged.
Otherwise the latest accepted review of a call counts.

A review is published before it is judged, and it stays in JW_REVIEWS (the
audit trail: it cannot be deleted) even when the recovery worker then
ignores it; review exits 3 with the code and the reason in that case.

Exit status:
  0  the review was published and acknowledged
  1  unexpected failure: the publish failed
  4  unreachable: the server did not accept the connection within 2 s
  2  usage: a missing or bad flag, a key file that is not an nkey user seed
  3  refused, nothing published: {"error":{"code":…,"message":…}} on stdout
     (field_too_long for --operator or --evidence over 1,024 bytes;
     unknown_call when the call is not in the session's log; superseded_call
     when it has a later attempt, named in "latest"), or published but
     ignored by the recovery worker (invalid_review: not signed by a trusted
     key; review_conflict: it contradicts a completed review on record)`

func runReview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("review", "Sign and publish a review of an uncertain call.", reviewHelp, stderr)
	var cf clientFlags
	cf.register(fs, 10*time.Second)
	session := fs.String("session", "", "session id (required)")
	call := fs.String("call", "", "call id reviewed: the latest attempt of its chain (required)")
	verdict := fs.String("verdict", "", "not_executed, completed or uncertain (required)")
	evidence := fs.String("evidence", "", "reference to what you checked, e.g. a ticket or ledger query (required)")
	operator := fs.String("operator", "", "who you are, e.g. alice@ops (required)")
	keyFile := fs.String("key", "", "reviewer nkey seed file (required)")
	asJSON := fs.Bool("json", false, "print the signed review (and the call's assessment) as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	switch {
	case stream.ValidateSession(*session) != nil:
		return usageError(stderr, "review", "--session: %v", stream.ValidateSession(*session))
	case *call == "":
		return usageError(stderr, "review", "--call is required")
	case !schema.Verdict(*verdict).Valid():
		return usageError(stderr, "review", "--verdict must be not_executed, completed or uncertain, not %q", *verdict)
	case strings.TrimSpace(*evidence) == "":
		return usageError(stderr, "review", "--evidence is required: say what you checked")
	case strings.TrimSpace(*operator) == "":
		return usageError(stderr, "review", "--operator is required: say who you are")
	case *keyFile == "":
		return usageError(stderr, "review", "--key is required (create one with: jingwei keys new)")
	}
	if _, err := cf.log.logger(stderr); err != nil {
		return usageError(stderr, "review", "%v", err)
	}
	if len(*operator) > schema.MaxFieldBytes || len(*evidence) > schema.MaxFieldBytes {
		return writeError(stdout, schema.Errorf(schema.CodeFieldTooLong, "--operator and --evidence are limited to %d bytes (operator %d, evidence %d)", schema.MaxFieldBytes, len(*operator), len(*evidence)))
	}
	kp, err := loadUserKey(*keyFile)
	if err != nil {
		return usageError(stderr, "review", "%v", err)
	}
	r, err := recovery.SignReview(kp, schema.Review{
		V: schema.Version, Session: *session, CallID: *call,
		Operator: *operator, Evidence: *evidence, Verdict: schema.Verdict(*verdict),
		At: time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		return printError(stdout, err)
	}

	api, err := cf.connect(ctx, "review", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()
	rc, err := api.SubmitReview(ctx, r)
	if err != nil && !rc.Published() {
		st := printError(stdout, err)
		if errors.Is(err, schema.ErrUnknownCall) || errors.Is(err, schema.ErrSupersededCall) {
			fmt.Fprintf(stderr, "jingwei review: nothing published: review the latest attempt of a call in session %s (see jingwei status)\n", *session)
		}
		return st
	}
	out := callreport.NewReview(rc)
	if err != nil {
		// Published, but the recovery worker ignores it.
		st := writeError(stdout, err)
		switch rc.Check.Code {
		case string(schema.CodeReviewConflict):
			fmt.Fprintf(stderr, "jingwei review: the review changes nothing: a trusted completed review of this call is on record, and completed is final\n")
		default:
			fmt.Fprintf(stderr, "jingwei review: the review changes nothing; sign with a key listed in the recovery worker's --trust-reviewers (jingwei keys pub --key FILE prints yours)\n")
		}
		return st
	}
	if *asJSON {
		_ = writeJSON(stdout, out)
		return exitOK
	}
	callreport.WriteReview(stdout, out, rc.InspectErr)
	return exitOK
}
