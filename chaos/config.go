package chaos

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Mode says what a run tests.
type Mode string

// The modes of a run.
const (
	// ModeCluster starts a NATS cluster of Config.Nodes nodes on loopback
	// (child processes, TCP proxies between every pair of nodes on the
	// cluster routes) and kills and partitions its nodes. The default.
	ModeCluster Mode = "cluster"
	// ModeSingle starts one NATS node (a child process), no proxies, no
	// node faults.
	ModeSingle Mode = "single"
	// ModeExternal runs against an existing deployment (Config.Server,
	// Config.AuthDir): the harness starts its own tool workers and recovery
	// worker against it and kills those, but never touches the NATS nodes.
	ModeExternal Mode = "external"
)

// Progress is told how far Run is; bench.Bar draws it on a terminal. Run
// calls it from one goroutine at a time.
type Progress interface {
	// Start is called once with the number of steps.
	Start(steps int)
	// Step is called when step i (0-based) named name starts, and again
	// with a new name as the step advances; i == steps at the end.
	Step(i int, name string)
	// Done is called once at the end, also after an error.
	Done()
}

// Config configures Run. The zero value, with Exe set, is a full cluster
// run; Quick switches every unset size to the quick schedule. Every
// duration and count documents its default (and its quick default); a
// negative count is invalid, zero means the default.
type Config struct {
	// Exe is the jingwei binary every child process runs (nodes through
	// the hidden `jingwei chaos node`, `jingwei setup`, `jingwei worker`,
	// `jingwei recover`). Required.
	Exe string
	// Dir is where the run's directory (stores, keys, child logs) is
	// created. Defaults to os.TempDir().
	Dir string
	// Keep keeps the run's directory after Run returns (its path is in
	// Report.Dir). By default it is removed.
	Keep bool
	// KeepOnFailure keeps it only when a must-hold invariant failed or
	// the run did not complete: the evidence of a failure (every child's
	// log, the stores) outlives the run, and a run that passed leaves
	// nothing behind.
	KeepOnFailure bool

	// Mode is what runs. Defaults to ModeCluster (ModeExternal when Server
	// is set).
	Mode Mode
	// Nodes is the cluster's size. Defaults to 3. Only ModeCluster.
	Nodes int
	// Server is the URL list of an existing deployment (ModeExternal).
	Server string
	// AuthDir is the role-credentials directory of an existing deployment
	// (<role>.nk, planner.nk, planners; `jingwei auth init`). Required in
	// ModeExternal; the other modes create their own.
	AuthDir string
	// ReviewerKey is an nkey seed file whose reviews the deployment's
	// recovery workers trust (ModeExternal). Empty: a fresh key, trusted
	// only by the harness's own recovery worker.
	ReviewerKey string
	// Operator, in ModeExternal, connects every role with its user JWT
	// AuthDir/<role>.creds ('jingwei auth creds', a server in operator
	// mode) instead of its nkey seed AuthDir/<role>.nk: the harness's own
	// connections and its child processes alike. False: the seeds.
	Operator bool
	// Replicas of the jingwei streams and buckets. Defaults to the
	// cluster's size in ModeCluster, 1 otherwise.
	Replicas int
	// Sync is the nodes' durability mode, "always" or "interval".
	// Defaults to "interval": the run kills processes, not machines, and
	// a killed process's writes survive in the page cache.
	Sync string

	// Quick selects the short schedule for every size left zero: 200
	// actions over 25 s, 2 recovery-worker kills, 1 node kill, 1 pause, 1
	// partition.
	Quick bool
	// Seed seeds every random choice (the workload, the schedule, the
	// workers' delays). Zero: a seed from the clock (Report.Seed has it).
	Seed int64

	// Actions is the number of logical actions (orders.create and
	// payments.charge, half each). Defaults to 1000 (quick: 200).
	Actions int
	// Sessions is the number of sessions the actions are spread over.
	// Defaults to 40.
	Sessions int
	// Republish is the fraction of actions published a second time with
	// the same request_id. Defaults to 0.05; negative means none.
	Republish float64
	// Duration is how long the workload is published and the faults run.
	// Defaults to 60 s (quick: 25 s).
	Duration time.Duration

	// Workers is the number of tool-worker processes. Defaults to 3.
	Workers int
	// KillEvery is the range [min, max] between two SIGKILLs of a tool
	// worker (a random live one, restarted at once). Defaults to [1.5 s,
	// 4 s].
	KillEvery [2]time.Duration
	// NoWorkerKills turns tool-worker kills off.
	NoWorkerKills bool
	// RecovererKills is how many times the recovery worker is SIGKILLed
	// (and restarted). Defaults to 3 (quick: 2); negative means none.
	RecovererKills int
	// NodeKills is how many NATS nodes are killed in turn (ModeCluster),
	// each down for NodeDown then restarted. Defaults to 2 (quick: 1);
	// negative means none.
	NodeKills int
	// NodeDown is how long a killed node stays down. Defaults to 20 s
	// (quick: 15 s): the node's loss costs the leaders it held an election
	// (nats-server's raft: 4–9 s), and the crash → assessment bound of a
	// cluster with a node down is about the time after it, with the node
	// still down, in which the harness aims tool-worker kills (every
	// ~1.1 s once the leader monitor sees every leader back, until a lease
	// TTL + 1.5 s before the node returns); a shorter outage leaves almost
	// no lease expiry to fall in it.
	NodeDown time.Duration
	// Pauses is how many times a tool worker is frozen (SIGSTOP) in the
	// middle of a call and resumed (SIGCONT) after more than the lease
	// TTL. Defaults to 2 (quick: 1); negative means none.
	Pauses int
	// NoReviewDuringPause leaves the calls of a frozen worker alone until
	// the host phase. By default the host and the reviewer handle them
	// while the worker is still frozen (review from the ledger, prepare,
	// let the retry run), as an operator who cannot tell a frozen worker
	// from a dead one would; the worker resumes after.
	NoReviewDuringPause bool
	// NoProbes runs the harness's recovery worker without a prober: every
	// needs_review payment waits for the harness's reviewer (a person), as
	// before probes. By default the recovery worker runs one (recover
	// --probe-key) with the example tools' probes, and the host waits a
	// moment for the probe's review before a person reviews.
	NoProbes bool
	// Partitions is how many times one node is cut from the others (all
	// its route proxies closed) and healed (ModeCluster). Defaults to 1;
	// negative means none.
	Partitions int
	// PartitionFor is how long a partition lasts. Defaults to 6 s.
	PartitionFor time.Duration
	// SlowFraction is the share of tool-worker incarnations whose bodies
	// wait (`jingwei worker --tool-delay-after`, or --tool-delay for some)
	// so that kills and pauses land in the middle of calls. Defaults to
	// 0.5; negative means none.
	SlowFraction float64
	// ToolDelay is the longest such wait; each slow incarnation draws its
	// own between 200 ms and ToolDelay. Defaults to 1.5 s.
	ToolDelay time.Duration
	// LeaseTTL is the lease TTL of every process. Defaults to 2 s.
	LeaseTTL time.Duration
	// Tools, when set, is a tool catalog (docs/catalog.md) every tool
	// worker runs (`jingwei worker --tools`) instead of the example tools:
	// it must provide orders.create, payments.charge and catalog.lookup
	// with their contracts, e.g. through an MCP backend of `jingwei tools
	// serve-examples`. The tool workers, and the MCP servers they start,
	// get the deployment in NATS_URL and JINGWEI_AUTH and this binary in
	// JINGWEI_BIN.
	Tools string

	// StartTimeout bounds the start of the deployment (nodes, set-up,
	// service). Defaults to 90 s.
	StartTimeout time.Duration
	// SettleTimeout bounds each wait for the system to settle (after the
	// faults, after the host phase). Defaults to 60 s + 10 lease TTLs.
	SettleTimeout time.Duration
	// Strict makes the crash → first assessment bound (its p99) decide
	// the exit status too; by default latencies are reported only.
	Strict bool
	// HostRounds bounds the rounds of the host and reviewer phase (prepare,
	// review, prepare again, let the plans run). Defaults to 6.
	HostRounds int

	// Progress, when set, is told the phases as they go. Nil: none.
	Progress Progress
	// Logger receives the harness's own log. Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// WithDefaults returns c with zero fields set to their defaults (Quick's
// where Quick is set).
func (c Config) WithDefaults() Config {
	quick := func(full, q int) int {
		if c.Quick {
			return q
		}
		return full
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Mode == "" {
		c.Mode = ModeCluster
		if c.Server != "" {
			c.Mode = ModeExternal
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Mode != ModeCluster {
		c.Nodes = 1
	}
	if c.Replicas == 0 {
		c.Replicas = 1
		if c.Mode == ModeCluster {
			c.Replicas = c.Nodes
		}
	}
	if c.Sync == "" {
		c.Sync = "interval"
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano() & (1<<53 - 1) // printable as a JSON number
	}
	if c.Actions == 0 {
		c.Actions = quick(1000, 200)
	}
	if c.Sessions == 0 {
		c.Sessions = 40
	}
	if c.Republish == 0 {
		c.Republish = 0.05
	}
	if c.Duration == 0 {
		c.Duration = time.Duration(quick(60, 25)) * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.KillEvery == [2]time.Duration{} {
		c.KillEvery = [2]time.Duration{1500 * time.Millisecond, 4 * time.Second}
	}
	if c.RecovererKills == 0 {
		c.RecovererKills = quick(3, 2)
	}
	if c.NodeKills == 0 {
		c.NodeKills = quick(2, 1)
	}
	if c.NodeDown == 0 {
		c.NodeDown = time.Duration(quick(20, 15)) * time.Second
	}
	if c.Pauses == 0 {
		c.Pauses = quick(2, 1)
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.PartitionFor == 0 {
		c.PartitionFor = 6 * time.Second
	}
	if c.SlowFraction == 0 {
		c.SlowFraction = 0.5
	}
	if c.ToolDelay == 0 {
		c.ToolDelay = 1500 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 2 * time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 90 * time.Second
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = time.Minute + 10*c.LeaseTTL
	}
	if c.HostRounds == 0 {
		c.HostRounds = 6
	}
	return c
}

// validate checks a config after WithDefaults; the error wraps
// ErrInvalidConfig and names the field.
func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Exe == "":
		return ErrNoExecutable
	case c.Mode != ModeCluster && c.Mode != ModeSingle && c.Mode != ModeExternal:
		return bad("Mode %q: want cluster, single or external", c.Mode)
	case c.Mode == ModeExternal && (c.Server == "" || c.AuthDir == ""):
		return bad("an external deployment needs Server and AuthDir")
	case c.Mode != ModeExternal && c.Operator:
		return bad("Operator is only for an external deployment (Mode %s)", c.Mode)
	case c.Mode != ModeExternal && c.Server != "":
		return bad("Server is only for an external deployment (Mode %s)", c.Mode)
	case c.Mode == ModeCluster && (c.Nodes < 3 || c.Nodes > 9):
		return bad("Nodes %d: a cluster needs 3 to 9 nodes", c.Nodes)
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("Replicas %d: want 1 to 5", c.Replicas)
	case c.Mode == ModeCluster && c.Replicas > c.Nodes:
		return bad("Replicas %d: more than the %d nodes", c.Replicas, c.Nodes)
	case c.Sync != "always" && c.Sync != "interval":
		return bad("Sync %q: want always or interval", c.Sync)
	case c.Actions < 1:
		return bad("Actions must be at least 1")
	case c.Sessions < 1 || c.Sessions > 10_000:
		return bad("Sessions %d: want 1 to 10000", c.Sessions)
	case c.Republish > 1:
		return bad("Republish %.2f: a fraction, at most 1", c.Republish)
	case c.Duration < time.Second:
		return bad("Duration must be at least 1s")
	case c.Workers < 1 || c.Workers > 64:
		return bad("Workers %d: want 1 to 64", c.Workers)
	case c.KillEvery[0] <= 0 || c.KillEvery[1] < c.KillEvery[0]:
		return bad("KillEvery %v: want 0 < min <= max", c.KillEvery)
	case c.NodeDown < 0 || c.PartitionFor < 0 || c.ToolDelay < 0:
		return bad("durations must not be negative")
	case c.SlowFraction > 1:
		return bad("SlowFraction %.2f: a fraction, at most 1", c.SlowFraction)
	case c.LeaseTTL < time.Second:
		return bad("LeaseTTL must be at least 1s")
	case c.StartTimeout <= 0 || c.SettleTimeout <= 0 || c.HostRounds < 1:
		return bad("StartTimeout, SettleTimeout and HostRounds must be positive")
	}
	return nil
}

// n returns a count whose negative value means none.
func n(v int) int { return max(v, 0) }

// fraction returns a fraction whose negative value means none.
func fraction(v float64) float64 { return max(v, 0) }

// label is a short description of the run's mode for the report.
func (c Config) label() string {
	var b strings.Builder
	if c.Quick {
		b.WriteString("quick, ")
	}
	switch c.Mode {
	case ModeCluster:
		fmt.Fprintf(&b, "cluster of %d", c.Nodes)
	case ModeSingle:
		b.WriteString("single node")
	case ModeExternal:
		b.WriteString("external deployment")
	}
	return b.String()
}
