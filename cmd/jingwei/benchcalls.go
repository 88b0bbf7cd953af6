package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jingwei/jingwei/bench"
)

func init() {
	register(command{name: "bench-calls", summary: "(run by jingwei bench) runtime calls of a no-op tool against a server, timed on request", run: runBenchCalls})
}

const benchCallsHelp = `  jingwei bench-calls --serve --server URL --prefix P --session S

A child process of jingwei bench (its tracing-off row): connects to the
server, opens session S of the topology with prefix P (which must exist),
prints {"tracing_hooks":…,"tracing":…} — whether this binary has the
tracing hooks (false in a build made with -tags jw_notracing) and whether
tracing is on (the standard OTEL_* variables) — then, for each line of
stdin holding a count, makes that many runtime calls of a no-op tool one
at a time and prints the nanoseconds they took. It exits at the end of
stdin.`

func runBenchCalls(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench-calls", "Runtime calls of a no-op tool, for jingwei bench.", benchCallsHelp, stderr)
	var c bench.CallsConfig
	serve := fs.Bool("serve", false, "serve counts of calls read from stdin (the only mode)")
	fs.StringVar(&c.Server, "server", "", "NATS server URL")
	fs.StringVar(&c.Prefix, "prefix", "", "topology prefix (the topology must exist)")
	fs.StringVar(&c.Session, "session", "", "session of the calls")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if !*serve {
		return usageError(stderr, "bench-calls", "--serve is required")
	}
	if err := bench.ServeCalls(ctx, c, os.Stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "jingwei bench-calls: %v\n", err)
		return exitFailure
	}
	return exitOK
}
