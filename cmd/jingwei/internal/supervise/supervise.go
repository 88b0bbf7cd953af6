// Package supervise keeps a long-running jingwei process up while the
// infrastructure comes and goes: it reruns the process with backoff,
// logging why, until a failure waiting cannot mend, and reports whether
// it is ready (the log, and GET /healthz on --health).
package supervise

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Backoff bounds: the first wait, and the longest.
const (
	FirstWait = 250 * time.Millisecond
	MaxWait   = 5 * time.Second
)

// Permanent reports a failure waiting cannot mend (the caller's rule:
// refused credentials, a conflicting topology, …); everything else is
// waited out.
type Permanent func(error) bool

// Health is a process's readiness, served as GET /healthz (200 "ready",
// 503 with what it waits for) and logged when it changes. It is safe for
// concurrent use.
type Health struct {
	mu    sync.Mutex
	ready bool
	why   string
	log   zerolog.Logger
}

// NewHealth returns a Health not ready yet ("starting") that logs to log.
func NewHealth(log zerolog.Logger) *Health { return &Health{why: "starting", log: log} }

// Set records readiness; a change is logged (ready at info, not ready at
// warn with why).
func (h *Health) Set(ready bool, why string) {
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

// Get returns the readiness and, when not ready, what it waits for.
func (h *Health) Get() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready, h.why
}

// Serve serves GET /healthz on addr until ctx ends ("" serves nothing).
func (h *Health) Serve(ctx context.Context, addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--health %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := h.Get()
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

// KeepUp runs attempt until ctx ends. attempt connects, sets up and runs
// the process, calling ready once it is up; when it returns an error that
// is not permanent, KeepUp reports the process not ready, waits (backoff
// from FirstWait to MaxWait, reset after a minute of running) and runs it
// again. It returns nil when ctx ends, or the permanent error.
func KeepUp(ctx context.Context, h *Health, what string, permanent Permanent, attempt func(ctx context.Context, ready func()) error) error {
	wait := FirstWait
	for tries := 1; ; tries++ {
		start := time.Now()
		err := attempt(ctx, func() { h.Set(true, "") })
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New(what + " stopped")
		}
		if permanent(err) {
			h.Set(false, err.Error())
			return err
		}
		if time.Since(start) > time.Minute {
			wait, tries = FirstWait, 1
		}
		h.Set(false, err.Error())
		h.log.Warn().Err(err).Int("attempt", tries).Dur("retry_in", wait).Msg(what + " not up; waiting for the server and JetStream")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, MaxWait)
	}
}

// WaitFor runs op until it succeeds, fails permanently, ctx ends or (d >
// 0) d has passed, with the backoff and logging of KeepUp; it returns op's
// last error. d <= 0 tries once.
func WaitFor(ctx context.Context, log zerolog.Logger, what string, d time.Duration, permanent Permanent, op func(ctx context.Context) error) error {
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	wait := FirstWait
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
		wait = min(2*wait, MaxWait)
	}
}
