package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/recoverer"
)

func crashStep(cfg Config) step {
	ttl := cfg.LeaseTTL
	target := Target{Check: ValueAtMost, Limit: (ttl + time.Second).Seconds(), Text: fmt.Sprintf("<= TTL+1s (%s)", ttl+time.Second)}
	rounds := max(cfg.Rounds-2, 2)
	sessions := cfg.n(8, 4, 2)
	what := fmt.Sprintf("%d calls", rounds*sessions)
	p50 := fmt.Sprintf("crash -> assessment p50, %s (raw = lease TTL)", what)
	p99 := fmt.Sprintf("crash -> assessment p99, %s (raw = lease TTL)", what)
	return step{
		scenario: "crash", name: "crash -> assessment", server: natsnode.SyncInterval, rows: []row{{p50, target}, {p99, target}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			lat, err := e.crash(ctx, rounds, sessions)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewResult(p50, Percentile(lat, 50), ttl.Seconds(), "s", target),
				NewResult(p99, Percentile(lat, 99), ttl.Seconds(), "s", target),
			}, nil
		},
	}
}

// crash runs, per round, a `jingwei worker` child process whose tool
// bodies hang after their work (--tool-delay-after), sends it one request
// on each of sessions fresh sessions, waits until every body runs
// (tool.started, or a tool.call{started}, on the log), SIGKILLs it and returns, for every open call,
// the seconds from the kill to its assessment on jw.assessments.<session>.
// The recovery worker runs in this process against the same server, with
// the same lease TTL.
func (e *env) crash(ctx context.Context, rounds, sessions int) ([]float64, error) {
	ttl := e.cfg.LeaseTTL
	topo, err := e.topology(ctx, e.prefix("cr"), func(tc *stream.TopologyConfig) { tc.LeaseTTL = ttl })
	if err != nil {
		return nil, err
	}
	defer e.drop(topo)
	if e.cfg.Exe == "" {
		return nil, ErrNoExecutable
	}
	cw, stopWatch, err := watchCrash(e.nc, topo)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	stopRec, err := e.startCrashRecoverer(ctx, topo)
	if err != nil {
		return nil, err
	}
	defer stopRec()
	var lat []float64
	for round := range rounds {
		l, err := e.crashRound(ctx, topo, cw, round, sessions)
		if err != nil {
			return nil, err
		}
		lat = append(lat, l...)
	}
	return lat, nil
}

// crashWatch is what the log and the assessments say, stamped on
// arrival.
type crashWatch struct {
	mu       sync.Mutex
	started  map[string]string    // session → call id of its start
	assessed map[string]time.Time // call id → arrival of its assessment
}

// watchCrash subscribes to the topology's events and assessments.
func watchCrash(nc *nats.Conn, topo *stream.Topology) (cw *crashWatch, stop func(), err error) {
	cw = &crashWatch{started: map[string]string{}, assessed: map[string]time.Time{}}
	evSub, err := nc.Subscribe(topo.Names().EventsSubject("*"), cw.event)
	if err != nil {
		return nil, nil, err
	}
	asSub, err := nc.Subscribe(topo.Names().AssessmentsSubject("*"), cw.assessment)
	if err != nil {
		_ = evSub.Unsubscribe()
		return nil, nil, err
	}
	stop = func() {
		_ = asSub.Unsubscribe()
		_ = evSub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		stop()
		return nil, nil, err
	}
	return cw, stop, nil
}

// event notes the call whose body runs: once its tool.started, or its
// tool.call in the combined form (call.started), is on the log.
func (cw *crashWatch) event(m *nats.Msg) {
	var ev schema.Event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	var id string
	switch {
	case ev.Type == schema.TypeStarted && ev.Started != nil:
		id = ev.Started.CallID
	case ev.Type == schema.TypeCall && ev.Call != nil && ev.Call.Started:
		id = ev.Call.CallID
	default:
		return
	}
	cw.mu.Lock()
	cw.started[stream.SessionOf(m.Subject)] = id
	cw.mu.Unlock()
}

// assessment notes when each call's first assessment arrived: one
// assessment or a batch (docs/protocol.md §5.4).
func (cw *crashWatch) assessment(m *nats.Msg) {
	at := time.Now()
	as, err := schema.DecodeAssessments(m.Data)
	if err != nil {
		return
	}
	cw.mu.Lock()
	for _, a := range as {
		if _, ok := cw.assessed[a.CallID]; !ok {
			cw.assessed[a.CallID] = at
		}
	}
	cw.mu.Unlock()
}

// all reports whether ok holds for every session, under the lock.
func (cw *crashWatch) all(sessions []string, ok func(session string) bool) bool {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for _, s := range sessions {
		if !ok(s) {
			return false
		}
	}
	return true
}

// startCrashRecoverer runs a recovery worker (no service) and waits until
// its events consumer exists.
func (e *env) startCrashRecoverer(ctx context.Context, topo *stream.Topology) (stop func(), err error) {
	rec, err := recoverer.New(recoverer.Config{Topology: topo, Name: "crash", DisableService: true, Logger: e.log, PlannerKey: e.planner})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(rctx) }()
	stop = func() {
		cancel()
		<-done
	}
	if err := waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		_, err := topo.JS.Consumer(ctx, topo.Names().StreamName("EVENTS"), topo.Prefix+"-recoverer-crash-events")
		return err == nil, nil
	}); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// crashRound starts a tool worker whose bodies hang after their work,
// sends it one request in each of sessions new sessions, kills it once
// every body runs, and returns the seconds from the kill to each call's
// first assessment.
func (e *env) crashRound(ctx context.Context, topo *stream.Topology, cw *crashWatch, round, sessions int) ([]float64, error) {
	ttl := e.cfg.LeaseTTL
	w, err := startChild(e.cfg.Exe, e.dir, fmt.Sprintf("worker-%d", round), "worker",
		"--server", e.srv.ClientURL(), "--prefix", topo.Prefix, "--lease-ttl", ttl.String(),
		"--owner", fmt.Sprintf("bench-worker-%d", round), "--tool-delay-after", "10m",
		"--log-format", "json", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	names := make([]string, sessions)
	for i := range names {
		names[i] = fmt.Sprintf("r%d-%d", round, i)
		q := schema.Request{V: schema.Version, RequestID: fmt.Sprintf("q-%d-%d", round, i), Session: names[i], Task: "t-1",
			Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A-1"}`)}
		b, _ := json.Marshal(q)
		if _, err := topo.JS.Publish(ctx, topo.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(stream.RequestMsgIDOf(q))); err != nil {
			w.Kill()
			return nil, fmt.Errorf("publish request: %w", err)
		}
	}
	// Every body is running.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	err = waitFor(wctx, 5*time.Millisecond, func() (bool, error) {
		if err := w.exitedErr(); err != nil {
			return false, err
		}
		return cw.all(names, func(s string) bool { return cw.started[s] != "" }), nil
	})
	wcancel()
	if err != nil {
		w.Kill()
		return nil, fmt.Errorf("waiting for the worker's bodies to start: %w", err)
	}
	killed := w.Kill()
	// Every open call is assessed.
	wctx, wcancel = context.WithTimeout(ctx, ttl+time.Minute)
	err = waitFor(wctx, 5*time.Millisecond, func() (bool, error) {
		return cw.all(names, func(s string) bool { _, ok := cw.assessed[cw.started[s]]; return ok }), nil
	})
	wcancel()
	if err != nil {
		return nil, fmt.Errorf("waiting for the assessments after the kill: %w", err)
	}
	var lat []float64
	cw.mu.Lock()
	for _, s := range names {
		lat = append(lat, cw.assessed[cw.started[s]].Sub(killed).Seconds())
	}
	cw.mu.Unlock()
	return lat, nil
}
