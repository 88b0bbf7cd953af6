package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/sessionlog"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

func init() {
	register(command{name: "inspect", summary: "classify one call of a session history", run: runInspect})
}

const exitStatusHelp = `Exit status:
  0  success: the JSON object above on stdout
  1  unexpected failure (e.g. a read error in the middle of the file);
     {"error":{"code":"internal","message":…}} on stdout
  2  usage: a missing or bad flag, or a file that cannot be opened
     (message on stderr, nothing on stdout)
  3  refused: the history or the request fails a check of docs/protocol.md §9;
     {"error":{"code":…,"message":…}} on stdout with one of the codes
     unknown_call, superseded_call (with "latest": the latest call of the
     chain), legacy_call, corrupt_history, history_too_large, field_too_long`

const inspectHelp = `  jingwei inspect --history FILE --call ID [--trust-planners FILE [--trust-reviewers FILE] [--trust-probers FILE]]
  jingwei inspect --session S [--server URL …] --call ID

Reads a session history (JSON Lines, one event per line with its seq, as
exported from jw.events.<session>) in one pass, verifies it and classifies the
latest attempt of one call by the decision table of docs/protocol.md §9. Prints the
assessment as one JSON object:

  {"session":…,"call_id":…,"tool":…,"task":…,"key":…,"contract":{…},
   "outcome":"completed|not_started|uncertain","evidence":…,
   "decision":"refuse|retry_allowed|needs_review","attempts":N,"chain":[…]}

With --session the history is loaded from the server's session log instead
(it is not fenced first: for a confirmed history, take the session over or
let the recovery worker do it).

With --trust-planners (one plan-signer public key per line, the recovery
workers' planner keys) every retry in the history is verified first: its
retry link must carry a plan signed by one of those keys for exactly that
call, and a reviewed_not_executed retry a review signed by a key in
--trust-reviewers (a person's) or, for a probe's automated review, in
--trust-probers. A retry that fails is refused with unauthorized_retry
(exit 3), naming its seq: the retry was not authorized by jingwei (a
compromised or impersonated writer). Without keys the history classifies as
it is.

Nothing is written anywhere: inspecting is always safe.

` + exitStatusHelp

// historySource chooses where a command reads a history from: a JSON Lines
// file (--history) or a session loaded from a live server (--session with
// the connection flags).
type historySource struct {
	src  sessionlog.Source
	nats natsFlags
}

func (s *historySource) register(fs *flag.FlagSet) {
	fs.StringVar(&s.src.File, "history", "", "session history file, JSON Lines (this or --session)")
	fs.StringVar(&s.src.Session, "session", "", "session id: load its history from the server (this or --history)")
	s.nats.register(fs)
}

// check returns a usage problem, or "" when the flags choose one source.
func (s *historySource) check() string { return s.src.Check() }

// open returns the history and a function that releases it. A session is
// loaded whole through stream.Logs.Load (limits enforced); a failure to
// reach the server comes through the history, so it is reported as a
// failure (exit 1), a too large or corrupt log as a refusal (exit 3).
func (s *historySource) open(ctx context.Context) (schema.History, func(), error) {
	return s.src.Open(ctx, func(ctx context.Context, session string) ([]schema.Event, error) {
		return s.nats.loadSession(ctx, "inspect", session)
	})
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", "Classify one call of a session history (offline).", inspectHelp, stderr)
	var src historySource
	src.register(fs)
	callID := fs.String("call", "", "call id to inspect (required)")
	plannersFile := fs.String("trust-planners", "", "verify every retry against these plan-signer public keys (one per line)")
	reviewersFile := fs.String("trust-reviewers", "", "with --trust-planners: reviewer public keys the reviewed_not_executed retries' reviews must be signed by")
	probersFile := fs.String("trust-probers", "", "with --trust-planners: prober public keys a retry resting on a probe's (automated) review may be signed by")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if (*reviewersFile != "" || *probersFile != "") && *plannersFile == "" {
		return usageError(stderr, "inspect", "--trust-reviewers and --trust-probers need --trust-planners")
	}
	var planners, reviewers, probers recovery.TrustedKeys
	for _, f := range []struct {
		name string
		into *recovery.TrustedKeys
	}{{*plannersFile, &planners}, {*reviewersFile, &reviewers}, {*probersFile, &probers}} {
		if f.name == "" {
			continue
		}
		b, err := os.ReadFile(f.name)
		if err != nil {
			return usageError(stderr, "inspect", "%v", err)
		}
		if *f.into, err = recovery.ParseTrustedKeys(b); err != nil {
			return usageError(stderr, "inspect", "%s: %v", f.name, err)
		}
	}
	if msg := src.check(); msg != "" {
		return usageError(stderr, "inspect", "%s", msg)
	}
	if *callID == "" {
		return usageError(stderr, "inspect", "--call is required")
	}
	h, done, err := src.open(ctx)
	if err != nil {
		return usageError(stderr, "inspect", "%v", err)
	}
	defer done()
	if *plannersFile != "" {
		// Two passes over the history: verify every retry, then classify.
		var events []schema.Event
		for ev, err := range h {
			if err != nil {
				return writeError(stdout, err)
			}
			events = append(events, ev)
		}
		h = schema.Events(events)
		if err := recovery.VerifyRetriesBy(h, planners, reviewers, probers); err != nil {
			return writeError(stdout, err)
		}
	}
	a, err := recovery.Inspect(h, *callID)
	if err != nil {
		return writeError(stdout, err)
	}
	if err := writeJSON(stdout, a); err != nil {
		fmt.Fprintf(stderr, "jingwei inspect: %v\n", err)
		return exitFailure
	}
	return exitOK
}
