package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/ledger"
	"github.com/jingwei/jingwei/cmd/jingwei/internal/sessionlog"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
)

func init() {
	register(command{name: "fence", summary: "raise the example ledger's fence for a session (before a not_executed review)", run: runFence})
	register(command{name: "ledger", summary: "list the example ledger's charges (what a reviewer checks)", run: runLedger})
	// The example tools' business data belongs to the tool workers: the
	// ledger is read and fenced with their role (docs/protocol.md §4).
	commandRole["fence"] = access.RoleWorker
	commandRole["ledger"] = access.RoleWorker
}

const fenceHelp = `  jingwei fence --session S [--epoch E] [--json]

Raises the fence of what the example tool payments.charge writes — the
ledger stream TOOLS_LEDGER, subject tools.ledger.<session> — to epoch E
(default: the session's latest epoch on its log, the epoch of its last
session.fenced), as tools.Tools.FenceLedger does: from then on a charge by
a writer of the session below epoch E is refused, so a frozen tool worker
that resumes can no longer land its payment. Raising to an epoch at or
below the current fence changes nothing.

This is step 1 before signing not_executed for a call whose writer may
still be running (jingwei help review): fence, then look for the effect
(jingwei ledger), then sign. The ledger is the tool workers' store: the
command connects with the worker role (<auth dir>/worker.nk, or --nkey /
--creds), the role that writes it.

Exit status: 0 raised; 1 unexpected failure (a ledger that predates
fencing); 2 usage; 3 refused (unknown_session: no events on the log and
no --epoch; permission_denied); 4 the server is unreachable.`

// fenceOutput is what fence prints with --json.
type fenceOutput = ledger.Fence

func runFence(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("fence", "Raise the example ledger's fence for a session.", fenceHelp, stderr)
	var nf natsFlags
	nf.register(fs)
	session := fs.String("session", "", "session id (required)")
	epoch := fs.Uint64("epoch", 0, "epoch to raise the fence to (default: the session's latest on its log)")
	asJSON := fs.Bool("json", false, "print JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if err := stream.ValidateSession(*session); err != nil {
		return usageError(stderr, "fence", "--session: %v", err)
	}
	nf.connectTimeout = clientConnectTimeout
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if *epoch == 0 {
		h, err := nf.loadSession(ctx, "fence", *session)
		if err != nil {
			return printError(stdout, err)
		}
		*epoch = ledger.LatestEpoch(h)
		if *epoch == 0 {
			return printError(stdout, sessionlog.UnknownSession(*session))
		}
	}
	tl, closeFn, err := openTools(ctx, &nf, "fence")
	if err != nil {
		return printError(stdout, err)
	}
	defer closeFn()
	out, err := ledger.RaiseFence(ctx, tl, *session, *epoch)
	if err != nil {
		return printError(stdout, err)
	}
	if *asJSON {
		_ = writeJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintln(stdout, out)
	return exitOK
}

// openTools connects with the worker role and opens the example tools'
// stores.
func openTools(ctx context.Context, nf *natsFlags, name string) (*tools.Tools, func(), error) {
	nc, err := nf.connect(ctx, name, zerolog.Nop())
	if err != nil {
		return nil, nil, err
	}
	tl, err := ledger.Open(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return tl, nc.Close, nil
}

const ledgerHelp = `  jingwei ledger [--session S] [--call C] [--json]

Lists the charges of the example tool payments.charge in its ledger
(TOOLS_LEDGER), oldest first: what a reviewer checks before signing a
verdict for a payment ("ledger TOOLS_LEDGER seq N" is the evidence). A
raised fence is not a charge and is not listed. --session and --call
narrow the list. The ledger is the tool workers' store: the command
connects with the worker role (<auth dir>/worker.nk, or --nkey / --creds).

Output: one line per charge; --json prints {"charges":[…]}.

Exit status: 0 success (an empty list included); 1 unexpected failure;
2 usage; 3 refused (permission_denied); 4 the server is unreachable.`

func runLedger(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ledger", "List the example ledger's charges.", ledgerHelp, stderr)
	var nf natsFlags
	nf.register(fs)
	session := fs.String("session", "", "only the charges of this session")
	call := fs.String("call", "", "only the charges of this call id")
	asJSON := fs.Bool("json", false, "print JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	nf.connectTimeout = clientConnectTimeout
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tl, closeFn, err := openTools(ctx, &nf, "ledger")
	if err != nil {
		return printError(stdout, err)
	}
	defer closeFn()
	all, err := tl.Ledger(ctx)
	if err != nil {
		return printError(stdout, err)
	}
	charges := ledger.Charges(all, *session, *call)
	if *asJSON {
		_ = writeJSON(stdout, struct {
			Charges []tools.Charge `json:"charges"`
		}{charges})
		return exitOK
	}
	ledger.WriteCharges(stdout, charges)
	return exitOK
}
