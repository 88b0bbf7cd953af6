package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// The scale scenario: what a fleet costs per session.
//
//   - storm: a tool worker owning every partition dies with one call open
//     in each of n sessions; the seconds from its death (its last lease
//     renewal) until every open call is assessed, by an in-process
//     recovery worker, and how many assessments were stored more than once;
//   - held: n sessions with one call each held by one in-process tool
//     worker: the lease (and all KV) writes per second while they sit idle,
//     and the worker's heap per held session (the heap with the sessions
//     held minus the heap once the worker let them go, over n);
//   - fleet: n sessions with one call each through one `jingwei worker`
//     process and one in-process recovery worker: the calls that ended ok,
//     the most consumers seen on any stream, and the wall time.

func scaleSteps(cfg Config) []step {
	ttl := cfg.LeaseTTL
	stormTarget := Target{Check: ValueAtMost, Limit: (ttl + 10*time.Second).Seconds(), Text: fmt.Sprintf("<= TTL+10s (%s)", ttl+10*time.Second)}
	once := Target{Check: ValueEqual, Limit: 0}
	var steps []step
	for _, n := range []int{cfg.n(1_000, 300, 10), cfg.n(10_000, 1_000, 20)} {
		name := fmt.Sprintf("storm: %d open calls assessed after the owner died", n)
		dup := fmt.Sprintf("storm: %d open calls, assessments stored more than once", n)
		steps = append(steps, step{
			scenario: "scale", name: fmt.Sprintf("storm of %d", n), server: natsnode.SyncInterval,
			rows: []row{{name, stormTarget}, {dup, once}},
			run: func(ctx context.Context, e *env) ([]Result, error) {
				took, dups, err := e.storm(ctx, n)
				if err != nil {
					return nil, err
				}
				return []Result{NewValueResult(name, took, "s", stormTarget), NewValueResult(dup, float64(dups), "messages", once)}, nil
			},
		})
	}
	held := cfg.n(10_000, 2_000, 20)
	writes := fmt.Sprintf("idle: lease writes/s while %d sessions sit idle", held)
	perK := fmt.Sprintf("idle: KV writes/s per 1,000 idle sessions (%d held)", held)
	mem := fmt.Sprintf("memory per held session (%d held, worker heap)", held)
	wTarget := Target{Check: ValueAtMost, Limit: 100}
	// 100 lease writes/s at 10,000 idle sessions is 10 per 1,000: the
	// same budget, spread over the sessions held here.
	kTarget := Target{Check: ValueAtMost, Limit: 100 * 1000 / float64(held), Text: fmt.Sprintf("<= 100/s over %d", held)}
	mTarget := Target{Check: ValueAtMost, Limit: 4096, Text: "<= 4 KiB"}
	steps = append(steps, step{
		scenario: "scale", name: fmt.Sprintf("%d held sessions", held), server: natsnode.SyncInterval,
		rows: []row{{writes, wTarget}, {perK, kTarget}, {mem, mTarget}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			h, err := e.held(ctx, held)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewValueResult(writes, h.leaseWrites, "writes/s", wTarget),
				NewValueResult(perK, h.kvWrites/float64(held)*1000, "writes/s", kTarget),
				NewValueResult(mem, h.bytesPerSession, "B", mTarget),
			}, nil
		},
	})
	n := cfg.n(100_000, 5_000, 50)
	ok := fmt.Sprintf("fleet: %d sessions x 1 call (1 worker process, 1 recoverer): calls ok", n)
	cons := fmt.Sprintf("fleet: %d sessions: most consumers on one stream", n)
	wall := fmt.Sprintf("fleet: %d sessions: wall time", n)
	okTarget := Target{Check: ValueEqual, Limit: float64(n)}
	cTarget := Target{Check: ValueBelow, Limit: 100}
	tTarget := Target{Check: ValueAtMost, Limit: 1800, Text: "<= 30 min"}
	steps = append(steps, step{
		scenario: "scale", name: fmt.Sprintf("fleet of %d sessions", n), server: natsnode.SyncInterval,
		rows: []row{{ok, okTarget}, {cons, cTarget}, {wall, tTarget}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			f, err := e.fleet(ctx, n)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewValueResult(ok, float64(f.ok), "calls", okTarget),
				NewValueResult(cons, float64(f.maxConsumers), "consumers", cTarget),
				NewValueResult(wall, f.wall.Seconds(), "s", tTarget),
			}, nil
		},
	})
	return steps
}

// noopTool is the scale scenarios' tool: read-only, returns its input.
func noopTool() worker.Tool {
	return worker.Tool{
		Metadata: effect.Metadata{Name: "bench.noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			return req.Arguments, nil
		},
	}
}

// publishRequests publishes one request of tool on each of n sessions
// named <pre>-<i>, asynchronously, and waits for every ack.
func publishRequests(ctx context.Context, js jetstream.JetStream, topo *stream.Topology, pre, tool, args string, n int) error {
	for i := range n {
		q := schema.Request{V: schema.Version, RequestID: fmt.Sprintf("q-%s-%d", pre, i), Session: fmt.Sprintf("%s-%d", pre, i), Task: "t-1", Tool: tool, Arguments: json.RawMessage(args)}
		b, _ := json.Marshal(q)
		for {
			_, err := js.PublishAsync(topo.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(stream.RequestMsgIDOf(q)))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("publish request: %w", err)
			}
			// The window of unacknowledged publishes stayed full (a
			// server busy with the workers' appends): wait for it to
			// drain, then publish this one again (its Msg-Id dedups).
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resultCounter counts the tool.result events of a topology (ok and other).
type resultCounter struct {
	ok, other atomic.Int64
	sub       *nats.Subscription
}

func countResults(nc *nats.Conn, topo *stream.Topology) (*resultCounter, error) {
	rc := &resultCounter{}
	sub, err := nc.Subscribe(topo.Names().EventsSubject("*"), func(m *nats.Msg) {
		var ev struct {
			Type   string `json:"type"`
			Result *struct {
				Status string `json:"status"`
			} `json:"result"`
		}
		if json.Unmarshal(m.Data, &ev) != nil || ev.Type != schema.TypeResult || ev.Result == nil {
			return
		}
		if ev.Result.Status == string(schema.StatusOK) {
			rc.ok.Add(1)
		} else {
			rc.other.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	rc.sub = sub
	return rc, nc.Flush()
}

// runRecoverer runs an in-process recovery worker until the returned stop.
func (e *env) runRecoverer(ctx context.Context, topo *stream.Topology, name string) (func(), error) {
	rec, err := recoverer.New(recoverer.Config{Topology: topo, Name: name, DisableService: true, Logger: e.log, PlannerKey: e.planner})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(rctx) }()
	select {
	case <-rec.Ready():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("recoverer: %v", err)
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	return func() { cancel(); <-done }, nil
}

// storm opens one call in each of n sessions as an owner of every
// partition, lets it die, and returns the seconds from its death (last
// renewal) until every call is assessed, and the assessments stored more
// than once.
func (e *env) storm(ctx context.Context, n int) (float64, int, error) {
	ttl := e.cfg.LeaseTTL
	topo, err := e.topology(ctx, e.prefix("st"), func(tc *stream.TopologyConfig) { tc.LeaseTTL = ttl })
	if err != nil {
		return 0, 0, err
	}
	defer e.drop(topo)
	sw := &stormWatch{assessed: map[string]time.Time{}}
	sub, err := e.nc.Subscribe(topo.Names().AssessmentsSubject("*"), sw.assessment)
	if err != nil {
		return 0, 0, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer sub.Unsubscribe()
	stop, err := e.runRecoverer(ctx, topo, "storm")
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	dead, err := openStorm(ctx, topo, n, ttl)
	if err != nil {
		return 0, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, ttl+2*time.Minute)
	defer cancel()
	if err := waitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		return sw.count() >= n, nil
	}); err != nil {
		return 0, 0, fmt.Errorf("%d of %d open calls assessed: %w", sw.count(), n, err)
	}
	sw.mu.Lock()
	took := sw.last.Sub(dead).Seconds()
	sw.mu.Unlock()
	if err := waitClassified(wctx, topo); err != nil {
		return 0, 0, err
	}
	// A fence's assessments are single messages (docs/protocol.md §7;
	// TestStormAssessedOnce checks each is single, with its Msg-Id), so
	// the stream's message count is the assessment count. Reading them
	// back (countAssessments) left client-side state that the next
	// scenario's heap measurement saw freed: the held sessions' memory
	// row read 4,140-5,080 B a session instead of ~3,980.
	info, err := topo.Assessments.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return took, int(info.State.Msgs) - n, nil
}

// stormWatch notes when each call's first assessment arrived, and the
// last of those arrivals.
type stormWatch struct {
	mu       sync.Mutex
	assessed map[string]time.Time
	last     time.Time
}

// assessment reads one assessment or a batch (docs/protocol.md §5.4).
func (sw *stormWatch) assessment(m *nats.Msg) {
	as, err := schema.DecodeAssessments(m.Data)
	if err != nil {
		return
	}
	sw.mu.Lock()
	for _, a := range as {
		if _, ok := sw.assessed[a.CallID]; !ok {
			sw.assessed[a.CallID] = time.Now()
			sw.last = time.Now()
		}
	}
	sw.mu.Unlock()
}

func (sw *stormWatch) count() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return len(sw.assessed)
}

// openStorm plays the tool worker that dies: it holds every partition,
// renewing the leases, opens one call in each of n sessions, then stops
// renewing. It returns its last renewal: when it died, as the leases see
// it.
func openStorm(ctx context.Context, topo *stream.Topology, n int, ttl time.Duration) (dead time.Time, err error) {
	holds := make([]*stream.PartitionHold, topo.Names().Partitions())
	for p := range holds {
		if holds[p], err = topo.Leases().AcquirePartition(ctx, p, "bench-dead", nil); err != nil {
			return time.Time{}, err
		}
	}
	alive, die := context.WithCancel(ctx)
	var lastRenewal atomic.Int64
	lastRenewal.Store(time.Now().UnixNano())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(ttl / 4)
		defer tick.Stop()
		for {
			select {
			case <-alive.Done():
				return
			case <-tick.C:
				t0 := time.Now()
				for _, h := range holds {
					_ = h.Renew(alive)
				}
				lastRenewal.Store(t0.UnixNano())
			}
		}
	}()
	err = openStormCalls(alive, topo, holds, n)
	die()
	<-renewed
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, lastRenewal.Load()), nil
}

// openStormCalls confirms n sessions in the held partitions and leaves a
// call open in each, 64 at a time; the first failure is returned.
func openStormCalls(alive context.Context, topo *stream.Topology, holds []*stream.PartitionHold, n int) error {
	sem := make(chan struct{}, 64)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range n {
		s := fmt.Sprintf("storm-%d", i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tk, err := topo.Leases().ConfirmIn(alive, holds[topo.Names().PartitionOf(s)], s)
			if err == nil {
				_, err = tk.Log.Append(alive, schema.Event{Type: schema.TypeCall, Call: &schema.Call{
					CallID: "c-" + s, Tool: "payments.charge", Arguments: json.RawMessage(`{}`), StartMarker: true,
					Operation: &schema.Operation{Task: "t-1", Key: "k-" + s, Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "v1"}},
				}})
			}
			if err != nil {
				select {
				case errs <- fmt.Errorf("storm setup %s: %w", s, err):
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// waitClassified waits until the storm's classifier has nothing pending,
// so that what is stored can be counted.
func waitClassified(ctx context.Context, topo *stream.Topology) error {
	return waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		c, err := topo.JS.Consumer(ctx, topo.Names().StreamName("EVENTS"), topo.Prefix+"-recoverer-storm-events")
		if err != nil {
			return false, nil
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0, nil
	})
}

// heldFigures are the held-sessions scenario's figures.
type heldFigures struct {
	leaseWrites, kvWrites float64
	bytesPerSession       float64
}

// held runs one call on each of n sessions through an in-process tool
// worker that keeps them in memory, then measures the KV writes while they
// sit idle and the heap they take.
func (e *env) held(ctx context.Context, n int) (heldFigures, error) {
	var f heldFigures
	topo, err := e.topology(ctx, e.prefix("hd"), func(tc *stream.TopologyConfig) { tc.LeaseTTL = e.cfg.LeaseTTL })
	if err != nil {
		return f, err
	}
	defer e.drop(topo)
	reg, err := worker.NewRegistry(noopTool())
	if err != nil {
		return f, err
	}
	rc, err := countResults(e.nc, topo)
	if err != nil {
		return f, err
	}
	defer rc.sub.Unsubscribe()
	w, err := toolworker.New(toolworker.Config{Topology: topo, Registry: reg, Owner: "bench-held", IdleTimeout: time.Hour, PollInterval: 100 * time.Millisecond, DisableGateway: true, Logger: e.log})
	if err != nil {
		return f, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stopWorker(); <-done }()
	if err := publishRequests(ctx, e.js, topo, "held", "bench.noop", `{"n":1}`, n); err != nil {
		return f, err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := waitFor(tctx, 50*time.Millisecond, func() (bool, error) {
		return rc.ok.Load()+rc.other.Load() >= int64(n), nil
	}); err != nil {
		return f, fmt.Errorf("%d of %d calls done: %w", rc.ok.Load()+rc.other.Load(), n, err)
	}
	if st := w.Stats(); st.Sessions != n {
		return f, fmt.Errorf("worker holds %d sessions, want %d", st.Sessions, n)
	}
	// Idle: every write to the buckets over a window of a few renew
	// intervals.
	kvLast := func() (leases, all uint64, err error) {
		for i, b := range []jetstream.KeyValue{topo.LeaseBucket, topo.PlanBucket, topo.Budget} {
			st, err := b.Status(ctx)
			if err != nil {
				return 0, 0, err
			}
			si, ok := st.(*jetstream.KeyValueBucketStatus)
			if !ok {
				return 0, 0, fmt.Errorf("bucket status %T", st)
			}
			seq := si.StreamInfo().State.LastSeq
			if i == 0 {
				leases = seq
			}
			all += seq
		}
		return leases, all, nil
	}
	l0, a0, err := kvLast()
	if err != nil {
		return f, err
	}
	t0 := time.Now()
	window := max(5*time.Second, 3*e.cfg.LeaseTTL)
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return f, ctx.Err()
	}
	l1, a1, err := kvLast()
	if err != nil {
		return f, err
	}
	d := time.Since(t0).Seconds()
	f.leaseWrites, f.kvWrites = float64(l1-l0)/d, float64(a1-a0)/d
	// Heap with the sessions held, then after the worker let them go.
	held := heapAfterGC()
	if st := w.Stats(); st.Sessions != n {
		return f, fmt.Errorf("worker holds %d sessions after the idle window, want %d", st.Sessions, n)
	}
	stopWorker()
	<-done
	done <- nil // for the deferred stop
	gone := heapAfterGC()
	runtime.KeepAlive(w)
	f.bytesPerSession = (float64(held) - float64(gone)) / float64(n)
	return f, nil
}

func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fleetFigures are the fleet scenario's figures.
type fleetFigures struct {
	ok           int
	maxConsumers int
	wall         time.Duration
}

// fleet runs one call on each of n sessions through one `jingwei worker`
// process and an in-process recovery worker, watching the consumer count
// of every stream.
func (e *env) fleet(ctx context.Context, n int) (fleetFigures, error) {
	var f fleetFigures
	if e.cfg.Exe == "" {
		return f, ErrNoExecutable
	}
	ttl := e.cfg.LeaseTTL
	topo, err := e.topology(ctx, e.prefix("fl"), func(tc *stream.TopologyConfig) { tc.LeaseTTL = ttl })
	if err != nil {
		return f, err
	}
	defer e.drop(topo)
	rc, err := countResults(e.nc, topo)
	if err != nil {
		return f, err
	}
	defer rc.sub.Unsubscribe()
	stop, err := e.runRecoverer(ctx, topo, "fleet")
	if err != nil {
		return f, err
	}
	defer stop()
	t0 := time.Now()
	w, err := startChild(e.cfg.Exe, e.dir, "fleet-worker", "worker",
		"--server", e.srv.ClientURL(), "--prefix", topo.Prefix, "--lease-ttl", ttl.String(),
		"--owner", "bench-fleet", "--log-format", "json", "--log-level", "warn")
	if err != nil {
		return f, err
	}
	defer w.Stop(30 * time.Second)
	if err := publishRequests(ctx, e.js, topo, "fl", "catalog.lookup", `{"sku":"A-1"}`, n); err != nil {
		return f, err
	}
	streams := []string{"EVENTS", "REQUESTS", "REVIEWS", "PLANS", "ASSESSMENTS", "ANSWERS"}
	consumers := func() (int, error) {
		most := 0
		for _, s := range streams {
			st, err := e.js.Stream(ctx, topo.Names().StreamName(s))
			if err != nil {
				return 0, err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return 0, err
			}
			most = max(most, info.State.Consumers)
		}
		return most, nil
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	err = waitFor(tctx, 500*time.Millisecond, func() (bool, error) {
		if err := w.exitedErr(); err != nil {
			return false, err
		}
		c, err := consumers()
		if err != nil {
			return false, err
		}
		f.maxConsumers = max(f.maxConsumers, c)
		return rc.ok.Load()+rc.other.Load() >= int64(n), nil
	})
	f.wall = time.Since(t0)
	f.ok = int(rc.ok.Load())
	if err != nil {
		return f, fmt.Errorf("%d of %d calls done (%d not ok): %w", rc.ok.Load()+rc.other.Load(), n, rc.other.Load(), err)
	}
	return f, nil
}
