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

	// What the log and the assessments say, stamped on arrival.
	var (
		mu       sync.Mutex
		started  = map[string]string{}    // session → call id of its start
		assessed = map[string]time.Time{} // call id → arrival of its assessment
	)
	evSub, err := e.nc.Subscribe(topo.Names().EventsSubject("*"), func(m *nats.Msg) {
		var ev schema.Event
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		// A body runs once its tool.started, or its tool.call in the
		// combined form (call.started), is on the log.
		var id string
		switch {
		case ev.Type == schema.TypeStarted && ev.Started != nil:
			id = ev.Started.CallID
		case ev.Type == schema.TypeCall && ev.Call != nil && ev.Call.Started:
			id = ev.Call.CallID
		default:
			return
		}
		mu.Lock()
		started[stream.SessionOf(m.Subject)] = id
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	defer evSub.Unsubscribe()
	asSub, err := e.nc.Subscribe(topo.Names().AssessmentsSubject("*"), func(m *nats.Msg) {
		at := time.Now()
		// One assessment or a batch (docs/protocol.md §5.4).
		as, err := schema.DecodeAssessments(m.Data)
		if err != nil {
			return
		}
		mu.Lock()
		for _, a := range as {
			if _, ok := assessed[a.CallID]; !ok {
				assessed[a.CallID] = at
			}
		}
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	defer asSub.Unsubscribe()
	if err := e.nc.Flush(); err != nil {
		return nil, err
	}

	rec, err := recoverer.New(recoverer.Config{Topology: topo, Name: "crash", DisableService: true, Logger: e.log, PlannerKey: e.planner})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The recovery worker is running once its events consumer exists.
	if err := waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		_, err := topo.JS.Consumer(ctx, topo.Names().StreamName("EVENTS"), topo.Prefix+"-recoverer-crash-events")
		return err == nil, nil
	}); err != nil {
		return nil, err
	}

	var lat []float64
	for round := range rounds {
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
			mu.Lock()
			defer mu.Unlock()
			for _, s := range names {
				if started[s] == "" {
					return false, nil
				}
			}
			return true, nil
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
			mu.Lock()
			defer mu.Unlock()
			for _, s := range names {
				if _, ok := assessed[started[s]]; !ok {
					return false, nil
				}
			}
			return true, nil
		})
		wcancel()
		if err != nil {
			return nil, fmt.Errorf("waiting for the assessments after the kill: %w", err)
		}
		mu.Lock()
		for _, s := range names {
			lat = append(lat, assessed[started[s]].Sub(killed).Seconds())
		}
		mu.Unlock()
	}
	return lat, nil
}
