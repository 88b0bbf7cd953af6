package main

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/supervise"
	"github.com/jingwei/jingwei/metrics"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// Long-running commands (worker, recover) and setup never exit because
// the infrastructure is not there yet or just lost a node: they wait with
// backoff, logging why, and report whether they are ready (the log, and
// --health).

// permanent reports a failure waiting cannot mend: credentials the server
// refuses or a key file that is missing or unsafe, a topology that
// conflicts with jingwei's, a server too old, a configuration refused.
// Everything else (no server yet, JetStream not ready or without quorum, a
// request timeout, a stream leader being elected) is waited out.
func permanent(err error) bool {
	var pe permanentError
	return errors.As(err, &pe) || isAuthError(err) || errors.Is(err, stream.ErrTopologyConflict) || errors.Is(err, natsnode.ErrServerTooOld) ||
		errors.Is(err, stream.ErrInvalidSession) || errors.Is(err, toolworker.ErrInvalidConfig) || errors.Is(err, recoverer.ErrInvalidConfig)
}

// permanentError marks an error permanent for waitFor and keepUp.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// health is a process's readiness (supervise.Health), served on --health.
type health struct{ *supervise.Health }

func newHealth(log zerolog.Logger) *health { return &health{supervise.NewHealth(log)} }

// serve serves GET /healthz on addr until ctx ends ("" serves nothing).
func (h *health) serve(ctx context.Context, addr string) error { return h.Serve(ctx, addr) }

// keepUp runs attempt until ctx ends, again after each failure that is
// not permanent (supervise.KeepUp); it returns nil when ctx ends, or the
// permanent error.
func keepUp(ctx context.Context, h *health, what string, attempt func(ctx context.Context, ready func()) error) error {
	return supervise.KeepUp(ctx, h.Health, what, permanent, attempt)
}

// waitFor runs op until it succeeds, fails permanently, ctx ends or (d >
// 0) d has passed (supervise.WaitFor); it returns op's last error.
func waitFor(ctx context.Context, log zerolog.Logger, what string, d time.Duration, op func(ctx context.Context) error) error {
	return supervise.WaitFor(ctx, log, what, d, permanent, op)
}

// forcedReconnects counts, for the process, the reconnects its quorum
// watches forced (jingwei_nats_forced_reconnects_total with --metrics).
var forcedReconnects = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: metrics.Namespace, Name: "nats_forced_reconnects_total",
	Help: "Reconnects forced because JetStream stayed unreachable through the connected server (cut off from its cluster) for longer than a raft election.",
})

// watchQuorum watches a long-running process's connection for a server
// cut off from its cluster's JetStream (stream.WatchQuorum: after 12 s of
// 503s or silence while connected, it reconnects to another server of the
// pool, logging why) and counts what it forces in ms's registry (none:
// counted only). It returns the function that stops the watch.
func watchQuorum(ctx context.Context, nc *nats.Conn, log zerolog.Logger, ms *metricsServer) (stop func()) {
	if ms != nil {
		if err := ms.reg.Register(forcedReconnects); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			log.Warn().Err(err).Msg("metric nats_forced_reconnects_total")
		}
	}
	cfg := quorumWatch
	cfg.Logger, cfg.OnReconnect = log, func(string) { forcedReconnects.Inc() }
	return natsnode.WatchQuorum(ctx, nc, cfg).Stop
}

// quorumWatch is the watch's configuration (the zero value: its defaults,
// 12 s of failures, a probe a second); tests shorten it.
var quorumWatch natsnode.QuorumWatchConfig
