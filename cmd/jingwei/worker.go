package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/toolworker"
)

func init() {
	register(command{name: "worker", summary: "run a tool worker with the example tools (owns partitions of sessions by lease, runs their requests and plans)", run: runWorker})
}

const workerHelp = `  jingwei worker [--server URL] [--owner NAME] [--lease-ttl 10s] [--partitions 32] [--tool-delay 0]
                 [--tool-delay-after 0] [--health ADDR] [--tools FILE]

Runs a tool worker with the example tools (orders.create, payments.charge,
catalog.lookup), or with the tools of a catalog (--tools FILE, docs/catalog.md:
tools of MCP servers, HTTP endpoints and built-in tools, each with its
host-owned contract). It takes tool requests from jw.requests.<session>, owns
partitions of sessions through partition leases (one owner per partition,
requests of a session in order, sessions in parallel), records
every call on the session log and runs it through the canonical runtime, and
executes the retry plans published on jw.plans.<session>. It also serves
jw.api.call (micro service 'jingwei-gateway'): a call is published on the work
queue and answered with its tool.result from the session log, or with
result_pending after --call-timeout. A request is
acknowledged once its tool.call is recorded; a request whose request_id is
already in the log is never run again. Run as many workers as you like against
one server: the partitions spread over them (each takes its share, and gives
one back when another worker joins), and a worker that dies leaves its
partitions to the others after --lease-ttl.

SIGTERM or SIGINT drains: no new requests, running bodies finish (at most
--drain-timeout), then the partitions' consumers and leases are released.

--tool-delay and --tool-delay-after slow every body down, for demos and crash
tests: the first waits before the body does anything, the second after its
side effect (an order written, a charge booked) and before its answer, so a
process killed then leaves an executed call without a result.

Retry plans run only when signed by a key in --trust-planners (one nkey
public key per line; default <auth dir>/planners, which 'jingwei auth init'
and 'jingwei serve' write) and issued in jw_plans for exactly that plan.

Credentials: --creds FILE or --nkey FILE, else the worker role's key in the
--auth directory (default ./.jingwei/auth when it exists).

--lease-ttl must be the same for every process of a deployment: it is stored
with the leases bucket when the topology is made, and a worker started with
another value is refused (a topology conflict naming lease_ttl and both
values). So must --partitions (default 32): the request and plan streams
are made with that many partitions, and a worker started with another
number is refused (a topology conflict naming partitions and both values).

Infrastructure is waited for, never a reason to exit: a server not there
yet, JetStream not ready or without quorum (a cluster starting, a node
down), a missing topology (until 'jingwei setup' creates it) or the loss of
the connection while running are retried with backoff (250 ms to 5 s), each
try logged at warn with why. Readiness is logged ("ready", or "not ready"
with waiting_for) and, with --health ADDR, served as GET /healthz: 200
"ready", or 503 "not ready: <why>".

Each body gets its call's fencing token (session, epoch, call id, operation
key); the example tools make their writes conditional on it, so a worker
frozen past its lease cannot charge after a takeover (docs/tool-authors.md).

Exit status: 0 after a clean drain; 1 the credentials are refused or the
topology conflicts; 2 usage.`

// natsFlags are the connection flags of the long-running commands (docs/protocol.md
// §13): --server, --creds, --nkey, --tlsca and the subject --prefix.
type natsFlags struct {
	server, creds, nkey, tlsca, prefix, auth string
	// connectTimeout bounds the first connection (0: stream.Connect's
	// default); client commands set it to their --timeout.
	connectTimeout time.Duration
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.server, "server", envOr("NATS_URL", natsnode.DefaultURL), "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&n.creds, "creds", envOr("NATS_CREDS", ""), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&n.nkey, "nkey", envOr("NATS_NKEY", ""), "NATS nkey seed file for authentication (env NATS_NKEY)")
	fs.StringVar(&n.tlsca, "tlsca", envOr("NATS_CA", ""), "PEM file of CAs to verify the server's TLS certificate (env NATS_CA)")
	fs.StringVar(&n.prefix, "prefix", envOr("JINGWEI_PREFIX", "jw"), "subject prefix of the jingwei topology (env JINGWEI_PREFIX)")
	fs.StringVar(&n.auth, "auth", envOr("JINGWEI_AUTH", ""), "directory of role credentials (<role>.nk), used when --creds and --nkey are not given; default ./.jingwei/auth if it exists (env JINGWEI_AUTH)")
}

// toolFlags are the flags of a tool worker, shared by worker and serve.
type toolFlags struct {
	trustPlanners string
	owner         string
	maxSessions   int
	idle          time.Duration
	drainTimeout  time.Duration
	delay         time.Duration
	delayAfter    time.Duration
	callTimeout   time.Duration
	// approvals are the approval settings (approve.go); approvers and
	// rules are what check filled in from them.
	approvals approvalFlags
	approvers recovery.TrustedKeys
	rules     map[string]*worker.ApprovalRule
	// observer is told of every append of the worker's runtimes
	// (--metrics); nil: none. Not a flag.
	observer worker.Observer
	// toolsFile is --tools: a tool catalog (docs/catalog.md) run instead
	// of the example tools; catalog is it loaded (check), and its MCP
	// sessions live as long as the process.
	toolsFile string
	catalog   *catalog.Catalog
	tools     *catalog.Set
}

func (t *toolFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.trustPlanners, "trust-planners", envOr("JINGWEI_TRUST_PLANNERS", ""), "file of plan-signer public keys whose retry plans this worker runs, one per line (default <auth dir>/planners; env JINGWEI_TRUST_PLANNERS)")
	fs.StringVar(&t.owner, "owner", "", "owner id of this tool worker in leases and fences (default tw-<host>-<pid>-<random>; must be unique)")
	fs.IntVar(&t.maxSessions, "max-sessions", toolworker.DefaultMaxSessions, "most sessions this worker runs a call of at once (sessions beyond wait for a slot, counted and logged)")
	fs.DurationVar(&t.idle, "idle", toolworker.DefaultIdleTimeout, "drop a session from memory after this long without work (its partition stays owned)")
	fs.DurationVar(&t.drainTimeout, "drain-timeout", toolworker.DefaultDrainTimeout, "on SIGTERM, how long running bodies may take before they are cancelled")
	fs.DurationVar(&t.delay, "tool-delay", 0, "wait this long before every tool body (demos, crash tests)")
	fs.DurationVar(&t.delayAfter, "tool-delay-after", 0, "wait this long after every tool body's side effect, before its answer (demos, crash tests)")
	fs.DurationVar(&t.callTimeout, "call-timeout", toolworker.DefaultCallTimeout, "how long jw.api.call (served by this worker) waits for a tool result")
	fs.StringVar(&t.toolsFile, "tools", envOr("JINGWEI_TOOLS", ""), "tool catalog file (YAML, docs/catalog.md): run its tools (MCP servers, HTTP endpoints, built-in tools) instead of the example tools (env JINGWEI_TOOLS)")
	t.approvals.register(fs)
}

func (t *toolFlags) check() string {
	switch {
	case t.maxSessions < 1:
		return "--max-sessions must be at least 1"
	case t.delay < 0 || t.delayAfter < 0 || t.idle < 0 || t.drainTimeout < 0 || t.callTimeout < 0:
		return "durations must not be negative"
	}
	rules, err := t.approvals.rules()
	if err != nil {
		return err.Error()
	}
	t.rules = rules
	if t.toolsFile != "" {
		if t.catalog, err = catalog.Load(t.toolsFile); err != nil {
			return "--tools " + err.Error()
		}
	}
	return ""
}

// newToolWorker sets up the example tools on js and a tool worker running
// them on topo.
func (t *toolFlags) newToolWorker(ctx context.Context, js jetstream.JetStream, topo *stream.Topology, planners recovery.TrustedKeys, log zerolog.Logger) (*toolworker.Worker, error) {
	tl, err := tools.New(ctx, tools.Config{JS: js, Replicas: topo.Config().Replicas, Logger: log})
	if err != nil {
		return nil, err
	}
	tl.FailAfterWrite(t.approvals.failAfterWrite)
	list0 := tl.List()
	if t.catalog != nil {
		if t.tools == nil {
			t.tools = catalog.Open(t.catalog, log)
		}
		if list0, err = t.tools.Tools(ctx, list0); err != nil {
			return nil, err
		}
		log.Info().Str("catalog", t.toolsFile).Int("tools", len(list0)).Strs("mcp_servers", t.tools.ServerNames()).Msg("tool catalog loaded")
	}
	list, err := applyApprovalRules(toolworker.Delay{Before: t.delay, After: t.delayAfter}.Wrap(list0...), t.rules)
	if err != nil {
		return nil, err
	}
	reg, err := worker.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	if len(t.rules) > 0 && len(t.approvers) == 0 {
		log.Warn().Msg("tools require approval but no approver is trusted (--trust-approvers): their calls will time out")
	}
	if len(planners) == 0 {
		log.Warn().Msg("no trusted plan signers (--trust-planners, or planners in the --auth directory): every retry plan will be refused")
	}
	return toolworker.New(toolworker.Config{
		Topology: topo, Registry: reg, Owner: t.owner, MaxSessions: t.maxSessions,
		IdleTimeout: t.idle, DrainTimeout: t.drainTimeout, CallTimeout: t.callTimeout, Logger: log,
		Runtime: worker.Config{TrustedPlanners: planners, Observer: t.observer, TrustedApprovers: t.approvers, StopExhaustedTasks: t.approvals.stopExhausted},
	})
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("worker", "Run a tool worker with the example tools.", workerHelp, stderr)
	var (
		nf       natsFlags
		tf       toolFlags
		lf       logFlags
		ttl      time.Duration
		replicas int
		mf       metricsFlag
		parts    *int
	)
	nf.register(fs)
	tf.register(fs)
	lf.register(fs)
	mf.register(fs)
	fs.DurationVar(&ttl, "lease-ttl", 10*time.Second, "session lease TTL (at least 1s; the same for every process)")
	fs.IntVar(&replicas, "replicas", 1, "replicas of every stream and bucket: 1 on a single server, 3 in a cluster (the same for every process)")
	parts = partitionsFlag(fs)
	var healthAddr string
	fs.StringVar(&healthAddr, "health", "", "serve GET /healthz on this address (e.g. :8081): 200 once the worker runs, 503 while it waits for the server or JetStream")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if msg := tf.check(); msg != "" {
		return usageError(stderr, "worker", "%s", msg)
	}
	if ttl < time.Second {
		return usageError(stderr, "worker", "--lease-ttl must be at least 1s")
	}
	if replicas < 1 {
		return usageError(stderr, "worker", "--replicas must be at least 1")
	}
	if msg := checkPartitions(*parts); msg != "" {
		return usageError(stderr, "worker", "%s", msg)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "worker", "%v", err)
	}
	planners, file, err := nf.trustedPlanners(tf.trustPlanners)
	if err != nil {
		return usageError(stderr, "worker", "trusted planners %s: %v", file, err)
	}
	if tf.approvers, file, err = tf.approvals.approvers(&nf); err != nil {
		return usageError(stderr, "worker", "trusted approvers %s: %v", file, err)
	}
	ms, err := mf.listen()
	if err != nil {
		fmt.Fprintf(stderr, "jingwei worker: %v\n", err)
		return exitFailure
	}
	defer ms.close()
	tf.observer = ms.runtime()
	defer tf.closeTools()
	// The worker of the current attempt (keepUp builds a new one after a
	// transient failure): its leases are what the metric reads.
	var current atomic.Pointer[toolworker.Worker]
	ms.leases(func() metrics.Ownership { return ownership(current.Load()) })
	ms.serve(ctx, "worker", stderr)
	h := newHealth(log)
	if err := h.serve(ctx, healthAddr); err != nil {
		return usageError(stderr, "worker", "%v", err)
	}
	// The server, JetStream, the topology and the example tools' streams
	// are waited for (a cluster starting, a node down), never a reason to
	// exit: see keepUp.
	err = keepUp(ctx, h, "tool worker", func(ctx context.Context, ready func()) error {
		nc, topo, err := nf.ensureTopology(ctx, "worker", log, stream.TopologyConfig{LeaseTTL: ttl, Replicas: replicas, Partitions: *parts, Logger: log})
		if err != nil {
			return err
		}
		defer nc.Close()
		defer watchQuorum(ctx, nc, log, ms)()
		w, err := tf.newToolWorker(ctx, topo.JS, topo, planners, log)
		if err != nil {
			return err
		}
		current.Store(w)
		return runUntilUp(ctx, w.Run, ready)
	})
	if err != nil {
		fmt.Fprintf(stderr, "jingwei worker: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// closeTools ends the sessions of the catalog's MCP servers (a stdio
// server's process with its session).
func (t *toolFlags) closeTools() {
	if t.tools != nil {
		t.tools.Close()
	}
}

// workerStartup is how long a tool worker's Run must run without an error
// to count as up: Run fails only while it sets up its subscription, plan
// consumer and gateway.
const workerStartup = 500 * time.Millisecond

// runUntilUp runs run and calls ready once it has run workerStartup
// without returning; it returns what run returns.
func runUntilUp(ctx context.Context, run func(context.Context) error, ready func()) error {
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(workerStartup):
		ready()
	}
	return <-done
}
