package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

func init() {
	register(command{name: "plan", summary: "prepare a retry plan for one call of a session history", run: runPlan})
}

// maxReviewBytes bounds a review file; a review is a few hundred bytes.
const maxReviewBytes = 64 << 10

const planHelp = `  jingwei plan --history FILE --call ID [--review FILE]
  jingwei plan --session S [--server URL …] --call ID [--review FILE]

Inspects one call of a session history like 'jingwei inspect' and, when the
decision table allows it, prints a single-use retry plan that reuses the
call's operation key, canonical arguments and contract:

  {"v":1,"plan_id":"p-…","session":…,"task":…,"tool":…,"arguments":{…},
   "args_digest":"sha256:…","contract":{…},"key":…,"prior_call_id":…,
   "prior_seq":N,"basis":"not_started|uncertain_safe|reviewed_not_executed",
   "review":…,"issued_at":…}

--review FILE gives a review (one JSON object, docs/protocol.md §5). A review with
verdict completed refuses any retry; not_executed lets an uncertain call of an
unknown or non-idempotent tool be retried; uncertain changes nothing. Offline,
the review is trusted as given (its signature is not checked): this command is
for the trusted host or operator. The plan is only printed, never published.

` + exitStatusHelp + `,
     and for planning also completed, needs_review and invalid_review`

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan", "Prepare a retry plan for one call of a session history (offline).", planHelp, stderr)
	var src historySource
	src.register(fs)
	callID := fs.String("call", "", "call id to retry: the latest attempt of its chain (required)")
	reviewFile := fs.String("review", "", "review file, one JSON object (optional)")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if msg := src.check(); msg != "" {
		return usageError(stderr, "plan", "%s", msg)
	}
	if *callID == "" {
		return usageError(stderr, "plan", "--call is required")
	}
	var (
		review    *schema.Review
		reviewErr error
	)
	if *reviewFile != "" {
		b, err := readReviewFile(*reviewFile)
		if err != nil {
			return usageError(stderr, "plan", "%v", err)
		}
		r, err := recovery.DecodeReview(b)
		if err != nil {
			reviewErr = err
		}
		review = &r
	}
	h, done, err := src.open(ctx)
	if err != nil {
		return usageError(stderr, "plan", "%v", err)
	}
	defer done()
	if reviewErr != nil {
		// Like PrepareRetry, report a history problem before the review's.
		if _, err := recovery.Inspect(h, *callID); err != nil {
			return writeError(stdout, err)
		}
		return writeError(stdout, reviewErr)
	}
	p, err := recovery.PrepareRetry(h, *callID, review)
	if err != nil {
		return writeError(stdout, err)
	}
	if err := writeJSON(stdout, p); err != nil {
		fmt.Fprintf(stderr, "jingwei plan: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// readReviewFile reads at most maxReviewBytes of a review file; a bigger file
// is reported as such rather than truncated.
func readReviewFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot open review: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReviewBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read review: %w", err)
	}
	if len(b) > maxReviewBytes {
		return nil, fmt.Errorf("review file %s is larger than %d bytes", name, maxReviewBytes)
	}
	return b, nil
}
