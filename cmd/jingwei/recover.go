package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
)

func init() {
	register(command{name: "recover", summary: "run the recovery worker and the jingwei service (assessments, takeovers, reviews, plans)", run: runRecover})
}

const recoverHelp = `  jingwei recover [--server URL] --trust-reviewers FILE [--auto-plan] [--lease-ttl 10s] [--name main]
                  [--partitions 32] [--health ADDR] [--trust-probers FILE] [--probe-key FILE]
                  [--prober-nkey FILE | --prober-creds FILE]

Runs the recovery worker and the 'jingwei' NATS micro service (jw.api.inspect,
jw.api.prepare, jw.api.status; 'nats micro ls' lists it; jw.api.call is served
by the tool workers, 'jingwei worker'):

  - publishes an assessment on jw.assessments.<session> for every finished call
    (a session's assessments of results in batches: one message carries one
    assessment or an array of them, docs/protocol.md §5.4);
  - when a session's lease expires with calls open, takes the session over
    (new epoch, session.fenced, load, inspect) and publishes their assessments;
    on start it first takes over what expired while it was down;
  - accepts reviews from jw.reviews.<session> only when signed by a key in
    --trust-reviewers (lines "<public key> <name>", or keys alone; # comments); others
    are rejected and logged;
  - issues each retry plan exactly once, on a prepare request ('jingwei retry'),
    or automatically for retry_allowed calls with --auto-plan (off by default).

Without --trust-reviewers no review is ever accepted: uncertain calls of
unknown or non-idempotent tools then cannot be planned.

Probes (docs/protocol.md §10.1): --probe-key FILE runs a prober in this
process with the example tools' probes (payments.lookup, orders.lookup):
when a call is assessed uncertain and needs_review and its tool names a
probe, the prober runs it after the fence and publishes a review signed with
FILE's key and marked as a probe's — completed when the effect is found,
not_executed only for an authoritative not_found, evidence only otherwise.
Its key is trusted as a prober's, never as a person's; --trust-probers FILE
trusts other probers' keys. The prober is fed by this recovery worker's
assessments (no consumer of its own) and connects as the prober role, a role
of its own that may read the session logs, read and fence the tools' data
and publish reviews, and nothing else: --prober-nkey or --prober-creds, else
<auth dir>/prober.nk ('jingwei auth init' creates it), else --creds/--nkey.

Every plan is signed with --planner-key (default <auth dir>/planner.nk);
tool workers run only plans signed by a key they trust. A call whose chain
holds a retry without a plan signed by a trusted planner (--trust-planners,
the planner key's own by default) gets no plan: unauthorized_retry.

Credentials: --creds FILE or --nkey FILE, else the recoverer role's key in
the --auth directory (default ./.jingwei/auth when it exists).

--lease-ttl and --partitions (default 32) must be the same for every process
of a deployment: a topology made with other values is refused at start,
naming the setting and both values. Run several
recovery workers for availability, each with its own --name (its durable
consumers are named after it; a restart with the same name resumes, and
rebuilds its open calls and calls awaiting review from the streams before it
answers status).

Infrastructure is waited for, never a reason to exit: a server not there
yet, JetStream not ready or without quorum (a cluster starting, a node
down), a missing topology (until 'jingwei setup' creates it) or the loss of
the connection while running are retried with backoff (250 ms to 5 s), each
try logged at warn with why. Readiness is logged ("ready", or "not ready"
with waiting_for) and, with --health ADDR, served as GET /healthz: 200
"ready", or 503 "not ready: <why>".

Exit status: 0 after SIGTERM/SIGINT; 1 the credentials are refused or the
topology conflicts; 2 usage (a bad flag, an unreadable or invalid
--trust-reviewers file).`

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("recover", "Run the recovery worker and the jingwei service.", recoverHelp, stderr)
	var (
		nf natsFlags
		lf logFlags
	)
	nf.register(fs)
	lf.register(fs)
	trustFile := fs.String("trust-reviewers", "", "file of trusted reviewer nkey public keys, one per line, each with the person's name (\"<key> <name>\")")
	plannerFile := fs.String("planner-key", envOr("JINGWEI_PLANNER_KEY", ""), "nkey seed this recovery worker signs its plans with (default <auth dir>/planner.nk; env JINGWEI_PLANNER_KEY)")
	trustPlanners := fs.String("trust-planners", envOr("JINGWEI_TRUST_PLANNERS", ""), "file of plan-signer public keys whose plans are accepted on the retries in a history (default: the planner key's own, plus <auth dir>/planners)")
	trustProbers := fs.String("trust-probers", "", "file of prober public keys whose signed automated reviews (a probe's) are accepted (\"<key> <name>\" lines); a person's review is never checked against them")
	probeKey := fs.String("probe-key", "", "run a prober in this process, signing its automated reviews with this nkey seed (trusted as a prober's): the example tools' probes, connected as the prober role")
	proberNkey := fs.String("prober-nkey", "", "nkey seed file of the prober role, for --probe-key's prober (default: <auth dir>/prober.nk)")
	proberCreds := fs.String("prober-creds", "", "credentials file of the prober role, for --probe-key's prober (default: <auth dir>/prober.nk)")
	autoPlan := fs.Bool("auto-plan", false, "issue plans for retry_allowed calls without a prepare request")
	ttl := fs.Duration("lease-ttl", 10*time.Second, "session lease TTL (at least 1s; the same for every process)")
	partitions := partitionsFlag(fs)
	name := fs.String("name", recoverer.DefaultName, "name of this recovery worker (its durable consumers); unique per running instance")
	owner := fs.String("owner", "", "owner id in leases and fences (default recoverer-<name>-<random>)")
	_ = fs.Duration("call-timeout", 0, "ignored: jw.api.call is served by the tool workers now (jingwei worker --call-timeout)")
	var mf metricsFlag
	mf.register(fs)
	replicas := fs.Int("replicas", 1, "replicas of every stream and bucket: 1 on a single server, 3 in a cluster (the same for every process)")
	healthAddr := fs.String("health", "", "serve GET /healthz on this address (e.g. :8082): 200 once the recovery worker is ready (reconciled, serving), 503 while it waits for the server or JetStream")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *ttl < time.Second {
		return usageError(stderr, "recover", "--lease-ttl must be at least 1s")
	}
	if *replicas < 1 {
		return usageError(stderr, "recover", "--replicas must be at least 1")
	}
	if msg := checkPartitions(*partitions); msg != "" {
		return usageError(stderr, "recover", "%s", msg)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "recover", "%v", err)
	}
	trusted, planner, planners, err := recoverKeys(&nf, *trustFile, *plannerFile, *trustPlanners, log)
	if err != nil {
		return usageError(stderr, "recover", "%v", err)
	}
	probers, err := recoverProbers(*trustProbers, *probeKey)
	if err != nil {
		return usageError(stderr, "recover", "%v", err)
	}
	var proberCC consoleConn
	if *probeKey != "" {
		if proberCC, err = nf.proberConn(*proberCreds, *proberNkey); err != nil {
			return usageError(stderr, "recover", "--probe-key: %v", err)
		}
	}
	if *owner == "" {
		// One owner id for every attempt below, as one process.
		*owner = "recoverer-" + *name + "-" + nuid.Next()
	}
	ms, err := mf.listen()
	if err != nil {
		fmt.Fprintf(stderr, "jingwei recover: %v\n", err)
		return exitFailure
	}
	defer ms.close()
	observer, observed := ms.recovery()
	var proberObserve func(prober.Outcome)
	if *probeKey != "" {
		proberObserve = ms.prober()
	}
	ms.serve(ctx, "recover", stderr)
	h := newHealth(log)
	if err := h.serve(ctx, *healthAddr); err != nil {
		return usageError(stderr, "recover", "%v", err)
	}
	// The server, JetStream and the topology are waited for (a cluster
	// starting, a node down), never a reason to exit: see keepUp.
	err = keepUp(ctx, h, "recovery worker", func(ctx context.Context, ready func()) error {
		nc, topo, err := nf.ensureTopology(ctx, "recover", log, stream.TopologyConfig{LeaseTTL: *ttl, Replicas: *replicas, Partitions: *partitions, Logger: log})
		if err != nil {
			return err
		}
		defer nc.Close()
		defer watchQuorum(ctx, nc, log, ms)()
		tee := &teeObserver{next: observer}
		rec, err := recoverer.New(recoverer.Config{
			Topology: topo, Logger: log, TrustedReviewers: trusted, TrustedProbers: probers, AutoPlan: *autoPlan,
			Name: *name, Owner: *owner,
			PlannerKey: planner, TrustedPlanners: planners, Observer: tee,
		})
		if err != nil {
			return err
		}
		if *probeKey != "" {
			stop, err := nf.startProber(ctx, *probeKey, proberCC, rec, tee, proberObserve, log)
			if err != nil {
				return err
			}
			defer stop()
		}
		observed(rec)
		log.Info().Str("server", nc.ConnectedUrlRedacted()).Int("trusted_reviewers", len(trusted)).Bool("auto_plan", *autoPlan).Msg("recovery worker started")
		return runReady(ctx, rec, ready)
	})
	if errors.Is(err, recoverer.ErrInvalidConfig) {
		return usageError(stderr, "recover", "%v", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jingwei recover: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// runReady runs the recovery worker until ctx ends, calling ready once it
// is ready (reconciled, serving).
func runReady(ctx context.Context, rec *recoverer.Recoverer, ready func()) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-rec.Ready():
			ready()
		case <-rctx.Done():
		}
	}()
	return rec.Run(rctx)
}

// recoverKeys reads the keys the recovery worker trusts and signs with:
// the reviewers' (--trust-reviewers), its plan-signing key and the plan
// signers whose plans it accepts on the retries in a history (its own
// always among them). Every error is the command line's.
func recoverKeys(nf *natsFlags, trustFile, plannerFile, trustPlanners string, log zerolog.Logger) (trusted recovery.TrustedKeys, planner nkeys.KeyPair, planners recovery.TrustedKeys, err error) {
	if trustFile != "" {
		b, err := os.ReadFile(trustFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--trust-reviewers: %v", err)
		}
		if trusted, err = recovery.ParseTrustedKeys(b); err != nil {
			return nil, nil, nil, fmt.Errorf("--trust-reviewers %s: %v", trustFile, err)
		}
	}
	if len(trusted) == 0 {
		log.Warn().Msg("no trusted reviewer keys (--trust-reviewers): every review will be rejected")
	}
	planner, pfile, err := nf.plannerKey(plannerFile)
	if err != nil {
		if pfile == "" {
			return nil, nil, nil, err
		}
		return nil, nil, nil, fmt.Errorf("plan-signing key %s: %v", pfile, err)
	}
	planners, tfile, err := nf.trustedPlanners(trustPlanners)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("trusted planners %s: %v", tfile, err)
	}
	if pub, err := planner.PublicKey(); err == nil {
		if planners == nil {
			planners = recovery.TrustedKeys{}
		}
		planners[pub] = struct{}{}
	}
	return trusted, planner, planners, nil
}
