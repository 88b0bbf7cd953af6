package test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// stack is jingwei in one test process: an embedded server, the example
// tools, a recovery worker with its service, and tool workers started on
// demand, all trusting one plan signer.
type stack struct {
	t     *testing.T
	ctx   context.Context
	nc    *nats.Conn
	topo  *stream.Topology
	tools *tools.Tools
	reg   *worker.Registry
	pl    planner
	rec   *recoverer.Recoverer
}

// startStack starts the server, the tools and the recovery worker (with
// rc's changes), with the given lease TTL.
func startStack(t *testing.T, ttl time.Duration, rc func(*recoverer.Config)) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: ttl}})
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(tl.List()...)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, ctx: ctx, nc: nc, topo: topo, tools: tl, reg: reg, pl: newPlanner(t)}
	cfg := recoverer.Config{Topology: topo, PlannerKey: s.pl.kp}
	if rc != nil {
		rc(&cfg)
	}
	if s.rec, err = recoverer.New(cfg); err != nil {
		t.Fatal(err)
	}
	s.run(s.rec.Run)
	select {
	case <-s.rec.Ready():
	case <-ctx.Done():
		t.Fatal("recovery worker not ready")
	}
	return s
}

// run runs f until the test ends (or the returned stop is called).
func (s *stack) run(f func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			s.t.Errorf("Run: %v", err)
		}
	}
	s.t.Cleanup(stop)
	return stop
}

// worker starts a tool worker with the stack's tools (or reg, if given).
func (s *stack) worker(owner string, mod func(*toolworker.Config)) (stop func()) {
	s.t.Helper()
	cfg := toolworker.Config{Topology: s.topo, Registry: s.reg, Owner: owner, IdleTimeout: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond, CallTimeout: 20 * time.Second,
		Runtime: worker.Config{TrustedPlanners: s.pl.trusted}}
	if mod != nil {
		mod(&cfg)
	}
	tw, err := toolworker.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.run(tw.Run)
}

// api asks jw.api.<endpoint> with body and decodes the answer into out; it
// returns the error code of an error answer ("" for success).
func (s *stack) api(endpoint string, body, out any) string {
	s.t.Helper()
	b, _ := json.Marshal(body)
	var m *nats.Msg
	var err error
	for {
		m, err = s.nc.RequestWithContext(s.ctx, s.topo.Names().APISubject(endpoint), b)
		if !errors.Is(err, nats.ErrNoResponders) {
			break
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		s.t.Fatalf("%s: %v", endpoint, err)
	}
	if code := service.AnswerCode(m); code != "" {
		return code
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			s.t.Fatalf("%s answer %s: %v", endpoint, m.Data, err)
		}
	}
	return ""
}
