package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jingwei/jingwei/demo"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func init() {
	register(command{name: "demo", summary: "watch a crash and a safe recovery, end to end, on a throw-away server", run: runDemo})
}

const demoHelp = `  jingwei demo [--payment-lost] [--keep] [--json]

Runs the reference story through the real pipeline, with real processes, on a
fresh embedded NATS server in a temporary directory:

  1. a recovery worker ('jingwei recover') and a tool worker start as child
     processes of this binary;
  2. an agent asks for orders.create (idempotent) and payments.charge
     (non-idempotent);
  3. the tool worker is killed with SIGKILL in the middle of both bodies,
     after each wrote its business record;
  4. the recovery worker notices the expired leases, fences the sessions and
     classifies both calls: the order is retry_allowed, the payment
     needs_review;
  5. a plan is prepared for the order and a fresh tool worker runs it with
     the same operation key: still exactly one order record;
  6. the payment waits for review; the recovery worker's prober raises the
     ledger's fence, looks the charge up and signs the truthful verdict as a
     probe's review, without a person (completed if the charge is there,
     else not_executed); the retry is refused (completed) or runs once;
  7. a second payment, run by an agent in its own process, times out while
     its provider has not answered: nothing was fenced, so the probe cannot
     decide (evidence only, still needs_review); the provider's late charge
     lands and the demo's reviewer, checking the ledger, signs completed;
  8. a payment above the approval threshold waits for a signed approval
     across a killed tool worker and is charged once.

It prints the story step by step and a final table, takes well under 30
seconds and leaves nothing running. --payment-lost kills the payment before
it charges, so the probe signs not_executed and the retry runs.

Exit status: 0 the story ran as told; 1 a step failed (the message names it;
--keep keeps the child processes' logs); 2 usage.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return runDemoWorker(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("demo", "Watch a crash and a safe recovery, end to end, on a throw-away server.", demoHelp, stderr)
	paymentLost := fs.Bool("payment-lost", false, "kill the payment before it charges (the probe then signs not_executed)")
	keep := fs.Bool("keep", false, "keep the temporary directory (server store, child logs) and print where it is")
	asJSON := fs.Bool("json", false, "print the final report as JSON on stdout (the story then goes to stderr)")
	leaseTTL := fs.Duration("lease-ttl", 2*time.Second, "lease TTL of the tool worker that is killed (how soon recovery starts)")
	log, st, ok := parseLogged(fs, args, stderr, "demo")
	if !ok {
		return st
	}
	if *leaseTTL < time.Second {
		return usageError(stderr, "demo", "--lease-ttl must be at least 1s")
	}
	// With --json stdout carries the report alone; the story goes to stderr.
	story := stdout
	if *asJSON {
		story = stderr
	}
	cfg := demo.Config{Out: story, KeepDir: *keep, LeaseTTL: *leaseTTL, Logger: log}
	if *paymentLost {
		cfg.PaymentHold = demo.HoldBefore
	}
	rep, err := demo.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei demo: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		_ = writeJSON(stdout, rep)
	}
	return exitOK
}

const demoWorkerHelp = `  jingwei demo worker --server URL --auth DIR [--lease-ttl D] [--hold TOOL=before|after,…]

The demo's tool worker (started by 'jingwei demo', not meant to be run by
hand): a tool worker with the example tools whose bodies, for the tools named
in --hold, stop before or after their side effect and wait until the process
is killed.`

func runDemoWorker(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := newFlags("demo worker", "The demo's tool worker (bodies stop midway).", demoWorkerHelp, stderr)
	var nf natsFlags
	nf.register(fs)
	leaseTTL := fs.Duration("lease-ttl", 2*time.Second, "lease TTL of the sessions the worker owns")
	hold := fs.String("hold", "", "tools whose bodies stop: tool=before|after, comma separated")
	log, st, ok := parseLogged(fs, args, stderr, "demo worker")
	if !ok {
		return st
	}
	holds, err := demo.ParseHolds(*hold)
	if err != nil {
		return usageError(stderr, "demo worker", "%v", err)
	}
	nkey, err := nf.roleKeyFile("worker")
	if err != nil {
		return usageError(stderr, "demo worker", "%v", err)
	}
	planners, file, err := nf.trustedPlanners("")
	if err != nil {
		return usageError(stderr, "demo worker", "trusted planners %s: %v", file, err)
	}
	err = demo.RunWorker(ctx, demo.WorkerConfig{
		Connect:  natsnode.ConnectConfig{URL: nf.server, Creds: nf.creds, NKeySeedFile: nkey, TLSCA: nf.tlsca, Name: "jingwei demo worker", Logger: log},
		Planners: planners,
		Topology: stream.TopologyConfig{LeaseTTL: *leaseTTL},
		Holds:    holds,
		Logger:   log,
	})
	if err != nil && ctx.Err() == nil {
		log.Error().Err(err).Msg("demo worker failed")
		return exitFailure
	}
	return exitOK
}
