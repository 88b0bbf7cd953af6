package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jingwei/jingwei/bench"
	"github.com/jingwei/jingwei/chaos"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/catalog"
)

func init() {
	register(command{name: "chaos", summary: "kill, freeze and partition a deployment under load, then check that nothing ran twice or was lost", run: runChaos})
}

const chaosHelp = `  jingwei chaos [--quick] [--single | --server URL --auth DIR [--operator] [--reviewer-key FILE]] [--json] [--seed N]
                [--actions 1000] [--sessions 40] [--duration 60s] [--workers 3] [--kill-every 1.5s-4s]
                [--recoverer-kills 3] [--node-kills 2] [--node-down 20s] [--pauses 2] [--partitions 1]
                [--lease-ttl 2s] [--strict] [--keep | --keep-on-failure]

Tests a deployment the way a chaos run does, and prints a table of
invariants. By default it starts a real 3-node NATS cluster on loopback
(child processes, authorization on, a TCP proxy between every pair of nodes
on the cluster routes), sets up the topology as admin ('jingwei setup
--replicas 3'), and runs a recovery worker and --workers tool workers
('jingwei recover', 'jingwei worker'), each with its role's key. --single
runs one node instead; --server URL --auth DIR runs against an existing
deployment (the harness's own workers and recovery worker are killed, the
NATS nodes are never touched). DIR is the deployment's credentials
directory as 'jingwei serve' (DATA/auth) or 'jingwei auth init' makes it
(default $JINGWEI_AUTH, else ./.jingwei/auth): the run connects as admin,
agent, reviewer and host with their keys, and its tool workers and
recovery worker connect with worker.nk and recoverer.nk, sign plans with
planner.nk and trust the signers in planners. Every key is checked, and
each role connected once, before anything starts: a missing or refused
key fails the run at once, naming the role and the file. --operator, for
a server in operator mode, connects every role (the run's own connections
and its child processes) with DIR/<role>.creds ('jingwei auth creds')
instead.

The workload: --actions logical actions (orders.create and payments.charge,
half each) over --sessions sessions, published as an agent publishes them
(JetStream publish on jw.requests.<session>, the agent's key), evenly over
--duration; --republish of them (5 %) published again with the same
request_id. Meanwhile: a random tool worker is SIGKILLed every --kill-every
and restarted; the recovery worker is SIGKILLed --recoverer-kills times; on
a cluster --node-kills nodes are killed in turn (down for --node-down) and
--partitions times one node is cut from the others (--partition-for);
while a node is out and every leader is back on the others, the tool worker
with the most open calls is killed about every second instead of a random
one (these leases expire
with a node out and the leaders there: the samples of the cluster's bound);
--pauses times a tool worker is frozen with SIGSTOP in the middle of a
payment and resumed with SIGCONT after more than a lease TTL — while it is
frozen the host and reviewer handle the calls it left (unless
--no-review-during-pause): the reviewer raises the ledger's fence first, so
its late charge, after a truthful not_executed review, is refused by the
ledger (its fencing token is older than the fence). Part of the tool-worker incarnations (--slow) wait in
their bodies (--tool-delay-after, some --tool-delay) so kills land mid-call.

Then, once nothing moves: every retry_allowed call is prepared (a third by
3 concurrent prepares), every needs_review payment is reviewed from the
ledger (fence raised to the session's latest epoch, then: a charge by that
call: completed; none: not_executed) and prepared
again, every plan runs; then everything is read back as admin and checked:

  duplicate orders, double charges, plans used twice, re-published requests
  run twice, acknowledged requests lost, calls left open and unassessed,
  closed calls never assessed, wrong assessments, needs_review missing from
  status, stuck actions, reviews contradicting the ledger, charges that got
  past the ledger's fence (must all be 0);
  assessments repeated, side effects after their call was fenced,
  concurrent prepares not answered with the plan (reported); crash -> first
  assessment p50/p90/p99/max against TTL+1s (one node) or TTL+5s (replicas).

On a cluster the harness also polls, every 100 ms on each node, who leads
the JetStream meta group, KV_jw_leases, JW_EVENTS and JW_ASSESSMENTS, and
prints the leaderless windows after each node kill, partition, heal and
restart (nats-server's raft elects a new leader after a random 4-9 s, and
nothing can be fenced or assessed in that stream until then). The latency
samples are split by what the cluster did between the lease's expiry and
the assessment: (i) all; (ii) a node down, every leader there — the
TTL+5s bound is checked on these; (iii) a leaderless window, with the
windows' lengths, the latency minus the leaderless time and the time from
the leaders' return to the fence; then the recovery worker restarted, and
healthy.

--seed repeats a run's random choices (the workload, the schedule, the
delays; printed in the report). --quick is the short schedule: 200 actions
over 25 s, fewer faults (a few minutes in all). --json prints the report as
JSON (--report FILE writes it to a file as well). A progress bar runs on stderr when it is a terminal (not with --json).

Exit status: 0 every must-be-0 invariant is 0; 1 one is not (or, with
--strict, the p99 latency misses its bound: all samples on one node, the
node-down samples (ii) on a cluster), or the run could not complete;
2 usage.`

// countFlag is an int flag whose default depends on --quick: -1 means
// "the default", 0 means none.
func countFlag(fs *flag.FlagSet, name, usage string) *int {
	return fs.Int(name, -1, usage)
}

// count maps a countFlag to chaos.Config: the default is 0 there, none is
// negative.
func count(v int) int {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return -1
	}
	return v
}

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "node" {
		return runChaosNode(ctx, args[1:], stderr)
	}
	cfg, out, st, ok := chaosConfig(args, stderr)
	if !ok {
		return st
	}
	if cfg.Exe == "" {
		var err error
		if cfg.Exe, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "jingwei chaos: cannot find this executable for the child processes: %v (use --exe)\n", err)
			return exitFailure
		}
	}
	if !out.asJSON && isTerminal(stderr) {
		cfg.Progress = &bench.Bar{W: stderr}
	}
	rep, err := chaos.Run(ctx, cfg)
	if errors.Is(err, chaos.ErrInvalidConfig) {
		return usageError(stderr, "chaos", "%v", err)
	}
	out.write(rep, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei chaos: %v\n", err)
		return exitFailure
	}
	if err := rep.Err(); err != nil {
		fmt.Fprintf(stderr, "jingwei chaos: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// chaosOutput is where the report goes: stdout as a table or JSON, and
// optionally a JSON file.
type chaosOutput struct {
	asJSON     bool
	reportFile string
}

// write prints rep (nil: nothing to print) and writes its file.
func (o chaosOutput) write(rep *chaos.Report, stdout, stderr io.Writer) {
	if rep == nil {
		return
	}
	if o.reportFile != "" {
		if f, ferr := os.Create(o.reportFile); ferr != nil {
			fmt.Fprintf(stderr, "jingwei chaos: --report: %v\n", ferr)
		} else {
			_ = rep.WriteJSON(f)
			f.Close()
		}
	}
	if o.asJSON {
		_ = rep.WriteJSON(stdout)
	} else {
		_ = rep.WriteTable(stdout)
	}
}

// chaosConfig parses the flags into the harness's configuration; false
// with the exit status when they are wrong.
func chaosConfig(args []string, stderr io.Writer) (chaos.Config, chaosOutput, int, bool) {
	fs := newFlags("chaos", "Kill, freeze and partition a deployment under load, then check its invariants.", chaosHelp, stderr)
	var lf logFlags
	lf.register(fs)
	if os.Getenv("JINGWEI_LOG_LEVEL") == "" {
		_ = fs.Set("log-level", "warn")
	}
	quick := fs.Bool("quick", false, "the short schedule: 200 actions over 25 s, fewer faults")
	single := fs.Bool("single", false, "one NATS node instead of a 3-node cluster (no node kills, no partitions)")
	server := fs.String("server", "", "run against this existing deployment (NATS URLs, comma separated) instead of starting one; needs --auth")
	auth := fs.String("auth", "", "the existing deployment's role-credentials directory (with --server; default ./.jingwei/auth when it exists, env JINGWEI_AUTH): every role's <role>.nk, planner.nk and planners, as 'jingwei serve' and 'jingwei auth init' make them")
	operator := fs.Bool("operator", false, "with --server: connect every role with DIR/<role>.creds (a server in operator mode; jingwei auth creds) instead of DIR/<role>.nk")
	reviewerKey := fs.String("reviewer-key", "", "nkey seed of a reviewer the deployment's recovery workers trust (with --server; default: a fresh key only the harness's own recovery worker trusts)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	reportFile := fs.String("report", "", "also write the JSON report to this file")
	seed := fs.Int64("seed", 0, "seed of every random choice (default: from the clock; printed)")
	actions := fs.Int("actions", 0, "logical actions (default 1000, 200 with --quick)")
	sessions := fs.Int("sessions", 40, "sessions the actions are spread over")
	duration := fs.Duration("duration", 0, "how long the workload is published and the faults run (default 60s, 25s with --quick)")
	workers := fs.Int("workers", 3, "tool-worker processes")
	killEvery := fs.String("kill-every", "1.5s-4s", "interval between two tool-worker SIGKILLs: MIN-MAX or one duration; 0 for none")
	recKills := countFlag(fs, "recoverer-kills", "SIGKILLs of the recovery worker (default 3, 2 with --quick; 0: none)")
	nodeKills := countFlag(fs, "node-kills", "NATS nodes killed in turn, cluster only (default 2, 1 with --quick; 0: none)")
	nodeDown := fs.Duration("node-down", 0, "how long a killed node stays down (default 20s, 15s with --quick; its leaders' elections take 4-9 s of it, and tool workers are killed in the rest)")
	pauses := countFlag(fs, "pauses", "SIGSTOP pauses of a tool worker in the middle of a payment (default 2, 1 with --quick; 0: none)")
	noPauseReview := fs.Bool("no-review-during-pause", false, "leave the calls of a frozen worker alone until the host phase")
	noProbes := fs.Bool("no-probes", false, "run the recovery worker without a prober: every needs_review payment waits for the harness's reviewer (a person)")
	partitions := countFlag(fs, "partitions", "partitions of one node from the others, cluster only (default 1; 0: none)")
	partitionFor := fs.Duration("partition-for", 6*time.Second, "how long a partition lasts")
	republish := fs.Float64("republish", 0.05, "fraction of actions published again with the same request_id")
	slow := fs.Float64("slow", 0.5, "fraction of tool-worker incarnations whose bodies wait (so kills land mid-call)")
	toolDelay := fs.Duration("tool-delay", 1500*time.Millisecond, "longest wait of a slow body")
	ttl := fs.Duration("lease-ttl", 2*time.Second, "lease TTL of every process (at least 1s)")
	replicas := fs.Int("replicas", 0, "replicas of the streams (default: 3 on the cluster, 1 otherwise)")
	nodes := fs.Int("nodes", 3, "nodes of the cluster")
	syncMode := fs.String("sync", "interval", "the nodes' fsync mode: interval or always")
	strict := fs.Bool("strict", false, "a p99 crash -> assessment latency over its bound fails the run too (on a cluster: the samples taken with a node down and every leader there)")
	keep := fs.Bool("keep", false, "keep the run's directory (stores, keys, child logs) and print where it is")
	keepOnFailure := fs.Bool("keep-on-failure", false, "keep the run's directory only when a must-hold invariant failed or the run did not complete, and print where it is")
	dir := fs.String("dir", os.TempDir(), "where the run's directory is created")
	exe := fs.String("exe", "", "jingwei binary for the child processes (default: this executable)")
	toolsFile := fs.String("tools", "", "tool catalog the tool workers run instead of the example tools (docs/catalog.md; e.g. the example tools behind an MCP backend of 'jingwei tools serve-examples')")
	if st, ok := parseFlags(fs, args); !ok {
		return chaos.Config{}, chaosOutput{}, st, false
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return chaos.Config{}, chaosOutput{}, usageError(stderr, "chaos", "%v", err), false
	}
	cfg := chaos.Config{
		Exe: *exe, Dir: *dir, Keep: *keep, KeepOnFailure: *keepOnFailure, Quick: *quick, Seed: *seed, Nodes: *nodes, Replicas: *replicas, Sync: *syncMode,
		Actions: *actions, Sessions: *sessions, Duration: *duration, Workers: *workers,
		RecovererKills: count(*recKills), NodeKills: count(*nodeKills), NodeDown: *nodeDown,
		Pauses: count(*pauses), NoReviewDuringPause: *noPauseReview, NoProbes: *noProbes, Partitions: count(*partitions), PartitionFor: *partitionFor,
		SlowFraction: *slow, ToolDelay: *toolDelay, LeaseTTL: *ttl, Strict: *strict, Logger: log,
	}
	if *republish == 0 {
		cfg.Republish = -1
	} else {
		cfg.Republish = *republish
	}
	if *slow == 0 {
		cfg.SlowFraction = -1
	}
	if *server != "" && *auth == "" {
		*auth = (&natsFlags{auth: os.Getenv("JINGWEI_AUTH")}).authDir() // as the other commands find it
	}
	err = chaosTarget(&cfg, *single, *server, *auth, *reviewerKey)
	if err == nil && *operator {
		if *server == "" {
			err = errors.New("--operator is for an existing deployment (--server)")
		}
		cfg.Operator = true
	}
	if err == nil {
		cfg.KillEvery, cfg.NoWorkerKills, err = parseRange(*killEvery)
		if err != nil {
			err = fmt.Errorf("--kill-every: %w", err)
		}
	}
	if err == nil && *ttl < time.Second {
		err = errors.New("--lease-ttl must be at least 1s")
	}
	if err == nil && *toolsFile != "" {
		err = chaosTools(&cfg, *toolsFile)
	}
	if err != nil {
		return chaos.Config{}, chaosOutput{}, usageError(stderr, "chaos", "%v", err), false
	}
	return cfg, chaosOutput{asJSON: *asJSON, reportFile: *reportFile}, exitOK, true
}

// chaosTarget sets the mode: one node, an existing deployment (--server
// with its keys), or a cluster of the harness's own.
func chaosTarget(cfg *chaos.Config, single bool, server, auth, reviewerKey string) error {
	switch {
	case single && server != "":
		return errors.New("--single and --server exclude each other")
	case server != "" && auth == "":
		return errors.New("--server needs the deployment's credentials: --auth DIR (or $JINGWEI_AUTH, or ./.jingwei/auth) holding every role's key as 'jingwei serve' makes it (DATA/auth): the run connects as admin, agent, reviewer and host and starts tool workers and a recovery worker with theirs")
	case server == "" && (auth != "" || reviewerKey != ""):
		return errors.New("--auth and --reviewer-key are for an existing deployment (--server)")
	case single:
		cfg.Mode = chaos.ModeSingle
	case server != "":
		cfg.Mode, cfg.Server, cfg.AuthDir, cfg.ReviewerKey = chaos.ModeExternal, server, auth, reviewerKey
	default:
		cfg.Mode = chaos.ModeCluster
	}
	return nil
}

// chaosTools checks the tool catalog the tool workers are to run and
// gives them its absolute path.
func chaosTools(cfg *chaos.Config, file string) error {
	if _, err := catalog.Load(file); err != nil {
		return fmt.Errorf("--tools %v", err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return fmt.Errorf("--tools: %v", err)
	}
	cfg.Tools = abs
	return nil
}

// parseRange parses "MIN-MAX" or one duration (MIN = MAX); "0" turns the
// kills off.
func parseRange(s string) ([2]time.Duration, bool, error) {
	if s == "0" {
		return [2]time.Duration{}, true, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	a, err := time.ParseDuration(lo)
	if err != nil {
		return [2]time.Duration{}, false, err
	}
	b := a
	if found {
		if b, err = time.ParseDuration(hi); err != nil {
			return [2]time.Duration{}, false, err
		}
	}
	if a <= 0 || b < a {
		return [2]time.Duration{}, false, fmt.Errorf("%q: want 0 < MIN <= MAX", s)
	}
	return [2]time.Duration{a, b}, false, nil
}

// runChaosNode is the hidden `jingwei chaos node`: one NATS node of a
// chaos run (chaos.NodeConfig.Args writes its command line), run until
// SIGTERM or SIGINT.
func runChaosNode(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, lf, st, ok := parseChaosNode(args, stderr)
	if !ok {
		return st
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "chaos node", "%v", err)
	}
	cfg.Logger = log
	err = chaos.RunNode(ctx, cfg, func(url string) {
		log.Info().Str("url", url).Str("name", cfg.Name).Msg("chaos node ready")
	})
	if errors.Is(err, chaos.ErrInvalidConfig) {
		return usageError(stderr, "chaos node", "%v", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jingwei chaos node: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// parseChaosNode parses the flags chaos.NodeConfig.Args writes.
func parseChaosNode(args []string, stderr io.Writer) (chaos.NodeConfig, logFlags, int, bool) {
	fs := newFlags("chaos node", "Run one NATS node of a chaos run (internal: jingwei chaos starts it).", "", stderr)
	var (
		lf  logFlags
		cfg chaos.NodeConfig
	)
	lf.register(fs)
	var syncMode, routes string
	fs.StringVar(&cfg.Name, "name", "", "server name")
	fs.StringVar(&cfg.Dir, "dir", "", "JetStream store directory")
	fs.StringVar(&cfg.Listen, "listen", "", "client address host:port")
	fs.StringVar(&cfg.AuthDir, "auth", "", "role-credentials directory")
	fs.StringVar(&syncMode, "sync", "", "fsync mode: interval or always")
	fs.StringVar(&cfg.ClusterName, "cluster-name", "", "cluster name (empty: a single node)")
	fs.StringVar(&cfg.ClusterListen, "cluster-listen", "", "route listener host:port")
	fs.StringVar(&routes, "routes", "", "route URLs to dial, comma separated")
	fs.StringVar(&cfg.ClusterAdvertise, "cluster-advertise", "", "route address advertised to the other nodes")
	if st, ok := parseFlags(fs, args); !ok {
		return cfg, lf, st, false
	}
	cfg.Sync = natsnode.SyncMode(syncMode)
	if routes != "" {
		cfg.Routes = strings.Split(routes, ",")
	}
	return cfg, lf, 0, true
}
