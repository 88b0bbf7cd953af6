package toolworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// probe is a set of test tools that record what ran.
type probe struct {
	mu      sync.Mutex
	runs    map[string][]int // session → echo arguments in run order
	started chan string      // block: session, when a body starts
	stopped chan error       // block: ctx.Err() when a body was cancelled
	gate    chan struct{}    // block: closed to let bodies finish
}

func newProbe() *probe {
	return &probe{runs: map[string][]int{}, started: make(chan string, 16), stopped: make(chan error, 16), gate: make(chan struct{})}
}

func (p *probe) tools() []worker.Tool {
	return []worker.Tool{
		{
			Metadata:    effect.Metadata{Name: "echo"}.WithEffect(effect.ReadOnly, "echo-v1"),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
			Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
				var a struct{ N int }
				if err := json.Unmarshal(req.Arguments, &a); err != nil {
					return nil, err
				}
				p.mu.Lock()
				p.runs[req.Session] = append(p.runs[req.Session], a.N)
				p.mu.Unlock()
				return req.Arguments, nil
			},
		},
		{
			Metadata: effect.Metadata{Name: "block"}.WithEffect(effect.NonIdempotent, "block-v1"),
			Body: func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
				p.started <- req.Session
				select {
				case <-p.gate:
					return json.RawMessage(`{"done":true}`), nil
				case <-ctx.Done():
					p.stopped <- ctx.Err()
					return nil, ctx.Err()
				}
			},
		},
	}
}

func (p *probe) ran(session string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.runs[session]...)
}

func (p *probe) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.runs {
		n += len(r)
	}
	return n
}

// setup starts an embedded server with 1 s leases.
func setup(t *testing.T) *stream.Topology {
	t.Helper()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	return topo
}

func registry(t *testing.T, tools ...worker.Tool) *worker.Registry {
	t.Helper()
	reg, err := worker.NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// running is a worker started by start.
type running struct {
	w      *toolworker.Worker
	cancel context.CancelFunc
	done   chan error
}

// start runs a worker until the test ends (or stop).
func start(t *testing.T, cfg toolworker.Config) *running {
	t.Helper()
	if cfg.Runtime.TrustedPlanners == nil {
		cfg.Runtime.TrustedPlanners = testPlanners(t)
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	w, err := toolworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the worker and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		close(r.done)
	case <-time.After(30 * time.Second):
		t.Errorf("Run did not return within 30s of cancel")
	}
}

// publish publishes a request on jw.requests.<session>.
func publish(t *testing.T, topo *stream.Topology, session, requestID, tool string, args string) {
	t.Helper()
	b, _ := json.Marshal(schema.Request{V: 1, RequestID: requestID, Session: session, Task: worker.DefaultTask, Tool: tool, Arguments: json.RawMessage(args)})
	if _, err := topo.JS.Publish(context.Background(), topo.Names().RequestsSubject(session), b); err != nil {
		t.Fatal(err)
	}
}

func publishRaw(t *testing.T, topo *stream.Topology, session string, b []byte) {
	t.Helper()
	if _, err := topo.JS.Publish(context.Background(), topo.Names().RequestsSubject(session), b); err != nil {
		t.Fatal(err)
	}
}

func history(t *testing.T, topo *stream.Topology, session string) []schema.Event {
	t.Helper()
	h, err := topo.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// results counts the tool.result events of a session.
func results(t *testing.T, topo *stream.Topology, session string) int {
	n := 0
	for _, ev := range history(t, topo, session) {
		if ev.Type == schema.TypeResult {
			n++
		}
	}
	return n
}

// calls returns the tool.call events of a session in log order.
func calls(t *testing.T, topo *stream.Topology, session string) []*schema.Call {
	var out []*schema.Call
	for _, ev := range history(t, topo, session) {
		if ev.Type == schema.TypeCall {
			out = append(out, ev.Call)
		}
	}
	return out
}

// waiting returns how many requests JW_REQUESTS still holds.
func waiting(t *testing.T, topo *stream.Topology) uint64 {
	t.Helper()
	info, err := topo.Requests.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func sessionName(i int) string { return fmt.Sprintf("s-%d", i) }

var _ = jetstream.AckExplicitPolicy

// testPlannerSeed is the plan-signing key of the tests: the workers start
// trusts it, signPlan signs with it.
const testPlannerSeed = "SUAIRGOZWR7KNGUNQ2NDG7E3CAGMZ3KWMZLJIRNCHGQHPCG3ZYQXMKWNAY"

func testPlanners(t *testing.T) recovery.TrustedKeys {
	t.Helper()
	kp, _ := nkeys.FromSeed([]byte(testPlannerSeed))
	pub, _ := kp.PublicKey()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return trusted
}

// signPlan signs p with the test planner key.
func signPlan(t *testing.T, p schema.Plan) schema.Plan {
	t.Helper()
	kp, _ := nkeys.FromSeed([]byte(testPlannerSeed))
	s, err := recovery.SignPlan(kp, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
