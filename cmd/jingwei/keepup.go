package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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

// health is a process's readiness, served on --health as GET /healthz
// (200 "ready", 503 with what it waits for) and logged when it changes.
type health struct {
	mu    sync.Mutex
	ready bool
	why   string
	log   zerolog.Logger
}

func newHealth(log zerolog.Logger) *health { return &health{why: "starting", log: log} }

// set records readiness; a change is logged (ready at info, not ready at
// warn with why).
func (h *health) set(ready bool, why string) {
	h.mu.Lock()
	changed := h.ready != ready || h.why != why
	h.ready, h.why = ready, why
	h.mu.Unlock()
	switch {
	case !changed:
	case ready:
		h.log.Info().Bool("ready", true).Msg("ready")
	default:
		h.log.Warn().Bool("ready", false).Str("waiting_for", why).Msg("not ready")
	}
}

func (h *health) get() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready, h.why
}

// serve serves GET /healthz on addr until ctx ends ("" serves nothing).
func (h *health) serve(ctx context.Context, addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--health %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := h.get()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	h.log.Info().Str("addr", ln.Addr().String()).Msg("health endpoint: GET /healthz")
	return nil
}

// keepUp runs attempt until ctx ends. attempt connects, sets up and runs
// the process, calling ready once it is up; when it returns an error that
// is not permanent, keepUp reports the process not ready, waits (backoff
// from 250 ms to 5 s, reset after a minute of running) and runs it again.
// It returns nil when ctx ends, or the permanent error.
func keepUp(ctx context.Context, h *health, what string, attempt func(ctx context.Context, ready func()) error) error {
	wait := 250 * time.Millisecond
	for tries := 1; ; tries++ {
		start := time.Now()
		err := attempt(ctx, func() { h.set(true, "") })
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New(what + " stopped")
		}
		if permanent(err) {
			h.set(false, err.Error())
			return err
		}
		if time.Since(start) > time.Minute {
			wait, tries = 250*time.Millisecond, 1
		}
		h.set(false, err.Error())
		h.log.Warn().Err(err).Int("attempt", tries).Dur("retry_in", wait).Msg(what + " not up; waiting for the server and JetStream")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// waitFor runs op until it succeeds, fails permanently, ctx ends or (d >
// 0) d has passed, with the backoff and logging of keepUp; it returns op's
// last error.
func waitFor(ctx context.Context, log zerolog.Logger, what string, d time.Duration, op func(ctx context.Context) error) error {
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	wait := 250 * time.Millisecond
	for tries := 1; ; tries++ {
		err := op(ctx)
		if err == nil || permanent(err) || ctx.Err() != nil || d <= 0 || time.Now().Add(wait).After(deadline) {
			return err
		}
		log.Warn().Err(err).Int("attempt", tries).Dur("retry_in", wait).Msg(what + ": waiting for the server and JetStream")
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
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
