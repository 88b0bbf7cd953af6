// Command jingwei records AI-agent tool calls on NATS JetStream and recovers
// them safely after a crash. Run `jingwei help` for the commands.
//
// This package only parses flags and the environment, builds configs and
// calls into the packages; it has no logic of its own.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	endTracing := startTracing(ctx, os.Args[1:], os.Stderr)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	endTracing()
	stop()
	os.Exit(code)
}
