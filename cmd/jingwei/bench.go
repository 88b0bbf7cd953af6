package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jingwei/jingwei/bench"
)

func init() {
	register(command{name: "bench", summary: "measure jingwei against raw JetStream on an embedded server (--quick for a smoke run)", run: runBench})
}

const benchHelp = `  jingwei bench [--quick] [--json] [--rounds N] [--only appends,runtime,…] [--lease-ttl 2s] [--strict]

Starts an embedded NATS server (store in a temporary directory under --dir,
removed afterwards) and measures every jingwei path next to the raw
JetStream operation it is built on, in the same run: fenced appends (1 and
64 sessions), runtime calls of a no-op tool, the tracing rows (--only
tracing: runtime calls with every span exported over OTLP against the
same calls with tracing off; and, with no OTEL_* set, against a build
without the tracing hooks — jingwei built twice by the go command from the
module in the working directory, so run it with go run ./cmd/jingwei
bench), the pipeline call (--only
pipeline: jw.api.call through a tool worker, one caller and 16, against a
raw JetStream work-queue request/reply with the same two appends and the
in-process runtime; p50/p99 latency, calls/s and, with sync always,
durable writes per call), the MCP call (--only mcp: a no-op tool of a Go
SDK MCP server called by MCP clients through 'jingwei mcp', a tool worker
and back, against the same clients calling the server directly; what
jingwei adds to one client's p50 and p99, and 16 clients' calls/s and
latencies), the recovery worker's
classification, Inspect of a 100,000-event history, plan issuance with 4
racing issuers (and the duplicate count), crash-to-assessment latency after
SIGKILL of a 'jingwei worker' child, and the resident memory of a 'jingwei
recover' child after 1,000,000 events, and the fleet scale rows (--only
scale): a recovery storm of 1,000 and 10,000 open calls (time to assess
them all after their owner died, and assessments stored twice), the lease
and KV writes per second while 10,000 sessions sit idle and the worker heap
per held session, and 100,000 sessions with one call each through one
'jingwei worker' child and one recovery worker (calls ok, the most
consumers on any stream, wall time). Figures are medians over rounds that
alternate jingwei and raw; ratio is always jingwei / raw (rates: higher is
better; times: lower is better; the target column says which).

The interval durability mode runs every scenario; a second server with sync
always then repeats appends, runtime and pipeline. --quick runs interval only, with
fewer rounds and events (100,000 events for the memory scenario, 5,000
sessions for the fleet run), in a few minutes: the scenario names say
what was cut.

Exit status: 0 every scenario ran, whether or not its target was met (read
the met column; --strict makes a missed target exit 1); 1 a scenario could
not run (its rows say why); 2 usage.`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", "Measure jingwei against raw JetStream in one run.", benchHelp, stderr)
	var lf logFlags
	lf.register(fs)
	if os.Getenv("JINGWEI_LOG_LEVEL") == "" {
		_ = fs.Set("log-level", "warn") // the table is the output; --log-level info shows each step
	}
	quick := fs.Bool("quick", false, "smoke run: fewer rounds and events, sync=interval only, under a minute")
	asJSON := fs.Bool("json", false, "print a JSON array of {scenario, jingwei, raw, unit, ratio, target, met} instead of the table")
	rounds := fs.Int("rounds", 0, "rounds per scenario (default 7, 3 with --quick)")
	only := fs.String("only", "", "comma-separated scenarios to run: "+strings.Join(bench.Scenarios, ","))
	ttl := fs.Duration("lease-ttl", bench.DefaultLeaseTTL, "lease TTL of the crash scenario (at least 1s)")
	dir := fs.String("dir", os.TempDir(), "directory for the temporary server store and child logs")
	exe := fs.String("exe", "", "jingwei binary for the child processes (default: this executable)")
	strict := fs.Bool("strict", false, "exit 1 when a target is missed")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *rounds < 0 {
		return usageError(stderr, "bench", "--rounds must not be negative")
	}
	if *ttl < time.Second {
		return usageError(stderr, "bench", "--lease-ttl must be at least 1s")
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return usageError(stderr, "bench", "%v", err)
	}
	cfg := bench.Config{Quick: *quick, Rounds: *rounds, Dir: *dir, Exe: *exe, LeaseTTL: *ttl, Logger: log}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	if cfg.Exe == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "jingwei bench: cannot find this executable for the child processes: %v (use --exe)\n", err)
			return exitFailure
		}
	}
	if isTerminal(stderr) { // isTerminal is in status.go
		cfg.Progress = &bench.Bar{W: stderr}
	}
	start := time.Now()
	rs, err := bench.Run(ctx, cfg)
	if errors.Is(err, bench.ErrInvalidConfig) {
		return usageError(stderr, "bench", "%v", err)
	}
	if *asJSON {
		_ = bench.WriteJSON(stdout, rs)
	} else {
		mode := "full"
		if *quick {
			mode = "quick"
		}
		fmt.Fprintf(stdout, "jingwei bench (%s) — %d CPUs, %s, %s/%s, %s\n\n", mode, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, time.Since(start).Round(time.Second))
		_ = bench.WriteTable(stdout, rs)
		fmt.Fprintln(stdout, "\nratio = jingwei / raw; figures are medians over rounds alternating jingwei and raw.")
	}
	if err != nil {
		fmt.Fprintf(stderr, "jingwei bench: %v\n", err)
		return exitFailure
	}
	if *strict {
		for _, r := range rs {
			if !r.Met {
				fmt.Fprintf(stderr, "jingwei bench: target missed: %s (%s)\n", r.Scenario, r.Target)
				return exitFailure
			}
		}
	}
	return exitOK
}
