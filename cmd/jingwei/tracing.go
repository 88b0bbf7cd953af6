package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jingwei/jingwei/internal/tracing"
)

// startTracing turns OpenTelemetry tracing on when the standard OTEL_*
// environment asks for an exporter (tracing.Wanted), with service.name
// jingwei-<command> unless OTEL_SERVICE_NAME says otherwise, and returns
// what flushes it at exit. Without OTEL_* it does nothing and costs
// nothing.
func startTracing(ctx context.Context, args []string, stderr io.Writer) func() {
	service := "jingwei"
	if len(args) > 0 {
		service += "-" + args[0]
	}
	shutdown, err := tracing.Setup(ctx, service)
	if err != nil {
		fmt.Fprintf(stderr, "jingwei: tracing off: %v\n", err)
		return func() {}
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}
}
