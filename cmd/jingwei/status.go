package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/sessionlog"
	"github.com/jingwei/jingwei/cmd/jingwei/internal/statustable"
	"github.com/jingwei/jingwei/stream"
)

func init() {
	register(command{name: "status", summary: "show open calls, calls awaiting review and retry plans", run: runStatus})
}

const statusHelp = `  jingwei status [--session S [--call ID]] [--json] [--watch [--interval D]]

Asks the recovery worker (jw.api.status) for the calls that are open (a
tool.call without its tool.result yet) and the calls awaiting a review
(needs_review, no plan issued since), and reads the retry plans in jw_plans
(issued: waiting for a tool worker to run them; consumed: used by an
attempt). --session limits everything to one session; --call ID (with
--session) also lists the call's reviews, each with where it came from (a
person, or a probe and which), its key and how the recovery worker judges it.

A call awaiting review whose evidence is no_result, timeout or cancelled was
closed without its body's own answer: the tool worker that ran it may STILL
BE RUNNING its body (a frozen process resumes after a takeover), and the
table says so (WRITER: may run). Before signing not_executed for it, fence
what the call writes (or confirm the process is gone) and only then check
the business system: see 'jingwei help review' and docs/protocol.md §10.

Output: three aligned tables; --json prints one JSON object
{"status":{…jw.api.status…},"plans":[…]}. --watch refreshes every --interval
until interrupted (Ctrl-C); with --json it prints one object per refresh.

Exit status: 0 success; 1 no service answers; 2 usage; 3 refused
({"error":{…}} on stdout: unknown_session for a --session with no event on
its log, bad_request, permission_denied); 4 the server is unreachable (it
did not accept the connection within 2 s; code unreachable).`

// statusView is what status prints with --json.
type statusView = statustable.View

// printStatus prints the status tables.
var printStatus = statustable.Print

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", "Show open calls, calls awaiting review and retry plans.", statusHelp, stderr)
	var cf clientFlags
	cf.register(fs, 10*time.Second)
	session := fs.String("session", "", "only this session (default: all)")
	call := fs.String("call", "", "with --session: also list the call's reviews and where each came from (a person or a probe)")
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *session != "" {
		if err := stream.ValidateSession(*session); err != nil {
			return usageError(stderr, "status", "--session: %v", err)
		}
	}
	if *call != "" && *session == "" {
		return usageError(stderr, "status", "--call needs --session")
	}
	if *interval <= 0 {
		return usageError(stderr, "status", "--interval must be positive")
	}
	if _, err := cf.log.logger(stderr); err != nil {
		return usageError(stderr, "status", "%v", err)
	}
	api, err := cf.connect(ctx, "status", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()

	if *session != "" {
		if err := sessionlog.Check(ctx, api.Client, *session); err != nil {
			return printError(stdout, err)
		}
	}
	src := statustable.Source{Service: api.Client, NC: api.nc, Prefix: api.prefix, Timeout: api.timeout}
	clear := *watch && !*asJSON && isTerminal(stdout)
	for {
		v, err := src.Load(ctx, *session, *call)
		if err != nil {
			if ctx.Err() != nil && *watch {
				return exitOK
			}
			return printError(stdout, err)
		}
		if *asJSON {
			_ = writeJSON(stdout, v)
		} else {
			if clear {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			if *watch {
				fmt.Fprintf(stdout, "jingwei status at %s (every %s, Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), *interval)
			}
			printStatus(stdout, v)
		}
		if !*watch {
			return exitOK
		}
		t := time.NewTimer(*interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return exitOK
		case <-t.C:
		}
		if !clear && !*asJSON {
			fmt.Fprintln(stdout)
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
