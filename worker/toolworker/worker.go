package toolworker

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// Worker is a tool worker: it owns partitions of sessions through their
// leases and runs their requests and retry plans (see the package
// documentation). Build it with New and call Run once. Its methods are
// safe for concurrent use.
type Worker struct {
	cfg  Config
	topo *stream.Topology
	// leases is the topology the worker's registration and partition
	// leases are written through: on a connection of their own (see
	// Config.LeaseTopology). Set by Run before anything uses it.
	leases *stream.Topology
	log    zerolog.Logger
	plans  *stream.Plans
	budget *stream.Budget
	ttl    time.Duration

	running atomic.Bool
	// runDone is Run's context's Done channel (set before Run starts
	// anything): once it is closed no item starts, even before Run's
	// goroutine has drained the partitions.
	runDone atomic.Pointer[<-chan struct{}]
	// slots bounds the sessions that run a request or plan at once
	// (MaxSessions); a session with work waits for a slot, counted.
	slots chan struct{}

	// counters for Stats.
	waiting   atomic.Int64  // sessions with work waiting for a slot now
	waits     atomic.Uint64 // times a session had to wait for a slot
	lastFull  atomic.Int64  // unix nanos of the last "full" log line
	taken     atomic.Uint64 // partitions acquired
	givenBack atomic.Uint64 // partitions released (drained)
	lost      atomic.Uint64 // partitions lost

	mu        sync.Mutex
	parts     map[int]*partition // owned (or being taken)
	draining  bool
	hardStop  context.Context // cancelled when the drain times out
	hardAbort context.CancelFunc
	wg        sync.WaitGroup // partition goroutines
}

// Stats are a tool worker's counters: what it owns and how full it is.
type Stats struct {
	// Partitions is how many partitions the worker owns now.
	Partitions int `json:"partitions"`
	// Sessions is how many sessions of them the worker holds in memory
	// (run recently or running).
	Sessions int `json:"sessions"`
	// Running is how many sessions run a request or plan now (at most
	// Config.MaxSessions).
	Running int `json:"running"`
	// Waiting is how many sessions have work but wait for a free slot
	// because Running is at MaxSessions.
	Waiting int `json:"waiting"`
	// Held is how many requests and plans the worker holds without having
	// started them (queued behind their session's current work, or
	// waiting for a slot).
	Held int `json:"held"`
	// Waits counts the times a session had to wait for a slot.
	Waits uint64 `json:"waits"`
	// Taken, GivenBack and Lost count partitions acquired, released after
	// a drain, and lost (lease lost or not renewed in time).
	Taken     uint64 `json:"taken"`
	GivenBack uint64 `json:"given_back"`
	Lost      uint64 `json:"lost"`
}

// New returns a worker for cfg (after WithDefaults). It fails with
// ErrInvalidConfig naming a missing or invalid field.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:    cfg,
		topo:   cfg.Topology,
		log:    cfg.Logger.With().Str("owner", cfg.Owner).Logger(),
		plans:  stream.NewPlans(cfg.Topology.PlanBucket),
		budget: stream.NewBudget(cfg.Topology.Budget),
		ttl:    cfg.Topology.Config().LeaseTTL,
		slots:  make(chan struct{}, cfg.MaxSessions),
		parts:  make(map[int]*partition),
	}
	w.hardStop, w.hardAbort = context.WithCancel(context.Background())
	return w, nil
}

// Owner returns the worker's owner id (as written in leases and fences).
func (w *Worker) Owner() string { return w.cfg.Owner }

// Owned returns the sessions the worker holds in memory in the partitions
// it owns (sessions that ran or run work recently), sorted.
func (w *Worker) Owned() []string {
	var out []string
	for _, p := range w.partitions() {
		out = append(out, p.sessionIDs()...)
	}
	slices.Sort(out)
	return out
}

// OwnedPartitions returns the partitions the worker owns right now,
// sorted.
func (w *Worker) OwnedPartitions() []int {
	var out []int
	for _, p := range w.partitions() {
		out = append(out, p.p)
	}
	slices.Sort(out)
	return out
}

// partitions returns the partitions owned and running.
func (w *Worker) partitions() []*partition {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*partition, 0, len(w.parts))
	for _, p := range w.parts {
		if p.ready.Load() {
			out = append(out, p)
		}
	}
	return out
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	st := Stats{Running: len(w.slots), Waiting: int(w.waiting.Load()), Waits: w.waits.Load(),
		Taken: w.taken.Load(), GivenBack: w.givenBack.Load(), Lost: w.lost.Load()}
	for _, p := range w.partitions() {
		st.Partitions++
		n, held := p.counts()
		st.Sessions += n
		st.Held += held
	}
	return st
}

// Run runs the worker until ctx is cancelled, then drains (see the package
// documentation) and returns nil. It serves jw.api.call (its Gateway)
// unless Config.DisableGateway is set. It returns an error if it cannot
// register itself or set up its gateway. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	runDone := ctx.Done()
	w.runDone.Store(&runDone)
	defer w.hardAbort()

	leases, closeLeases := w.leaseTopology(ctx)
	defer closeLeases()
	w.leases = leases
	reg, err := w.leases.Leases().RegisterWorker(ctx, w.cfg.Owner)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("toolworker: %w", err)
	}
	stopGateway := func() {}
	if !w.cfg.DisableGateway {
		// The gateway has a connection of its own: its reads of large
		// logs never queue the worker's appends and acks behind them.
		gt, closeGateway := w.ownTopology(ctx, "gateway")
		defer closeGateway()
		gw, err := NewGateway(GatewayConfig{Topology: gt, CallTimeout: w.cfg.CallTimeout, Owner: w.cfg.Owner, Logger: w.log,
			MaxCallsPerSession: w.cfg.MaxCallsPerSession, MaxCallsPerCaller: w.cfg.MaxCallsPerCaller, Caller: w.cfg.Caller})
		if err != nil {
			return err
		}
		// Calls in flight when the drain starts still wait for their
		// result (CallTimeout bounds them); new ones go to other workers.
		svc, err := gw.Serve(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("toolworker: gateway: %w", err)
		}
		var once sync.Once
		stopGateway = func() { once.Do(func() { _ = svc.Stop(); gw.Close() }) }
		defer stopGateway()
	}
	w.log.Info().Int("max_sessions", w.cfg.MaxSessions).Int("partitions", w.topo.Names().Partitions()).Dur("lease_ttl", w.ttl).Msg("tool worker running")

	acons, err := w.approvalConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while starting (its own connections take a moment
			// to open): a clean stop, nothing taken yet.
			return nil
		}
		return fmt.Errorf("toolworker: approval consumer: %w", err)
	}
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); w.balanceLoop(ctx, reg) }()
	go func() { defer loops.Done(); w.consumeApprovals(ctx, acons) }()
	<-ctx.Done()
	// Drain at once: no new work starts, running calls finish, then the
	// consumers are deleted and the leases released.
	w.mu.Lock()
	w.draining = true
	for _, p := range w.parts {
		p.drain()
	}
	w.mu.Unlock()
	stopGateway()
	loops.Wait()
	// Leave the registry, so that the others size their share without
	// this worker.
	rctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	if err := reg.Release(rctx); err != nil {
		w.log.Warn().Err(err).Msg("could not leave the worker registry")
	}
	cancel()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.DrainTimeout):
		w.log.Warn().Dur("drain_timeout", w.cfg.DrainTimeout).Msg("drain timed out; cancelling running bodies")
		w.hardAbort()
		<-done
	}
	w.log.Info().Msg("tool worker stopped")
	return nil
}

// balanceLoop renews the worker's registration every RenewInterval and
// rebalances every PollInterval, the first time one PollInterval after
// start (so that workers started together see each other).
func (w *Worker) balanceLoop(ctx context.Context, reg *stream.Registration) {
	renew := time.NewTicker(w.cfg.RenewInterval)
	defer renew.Stop()
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			rctx, cancel := context.WithTimeout(ctx, w.cfg.RenewInterval)
			if err := reg.Renew(rctx); err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("registration renewal failed")
			}
			cancel()
		case <-poll.C:
			w.balance(ctx)
			poll.Reset(w.cfg.PollInterval)
		}
	}
}

// share returns how many of n partitions a worker aims at among live
// workers: n/live rounded up.
func share(n, live int) int {
	live = max(live, 1)
	return (n + live - 1) / live
}

// preference orders partitions for an owner (rendezvous hashing): workers
// prefer different partitions, so that they rarely race for the same free
// one, and each gives up its least preferred first.
func preference(owner string, p int) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(owner))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(strconv.Itoa(p)))
	return h.Sum32()
}

// balance takes free partitions up to the worker's share, or drains one it
// has beyond it (one per round, so that a join moves partitions gradually
// and never leaves them all unowned at once).
func (w *Worker) balance(ctx context.Context) {
	live, err := w.leases.Leases().LiveWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("reading the worker registry failed")
		}
		return
	}
	leases, err := w.leases.Leases().PartitionLeases(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("reading the partition leases failed")
		}
		return
	}
	n := w.topo.Names().Partitions()
	nlive := len(live)
	if !slices.Contains(live, w.cfg.Owner) {
		nlive++
	}
	target := share(n, nlive)

	w.mu.Lock()
	if w.draining {
		w.mu.Unlock()
		return
	}
	var mine []*partition
	for _, p := range w.parts {
		if !p.isDraining() {
			mine = append(mine, p)
		}
	}
	w.mu.Unlock()
	if len(mine) > target {
		slices.SortFunc(mine, func(a, b *partition) int {
			return int64cmp(int64(preference(w.cfg.Owner, a.p)), int64(preference(w.cfg.Owner, b.p)))
		})
		p := mine[0]
		p.log.Info().Int("target", target).Int("owned", len(mine)).Int("workers", nlive).Msg("partition over this worker's share: draining it")
		p.drain()
		return
	}
	free := make([]int, 0, n)
	for p := range n {
		if _, held := leases[p]; held {
			continue
		}
		w.mu.Lock()
		_, ours := w.parts[p]
		w.mu.Unlock()
		if !ours {
			free = append(free, p)
		}
	}
	slices.SortFunc(free, func(a, b int) int {
		return int64cmp(int64(preference(w.cfg.Owner, b)), int64(preference(w.cfg.Owner, a)))
	})
	// The free partitions up to the share are taken together, the most
	// preferred first, and the round does not wait for them: a take in
	// flight counts as the worker's (it is in w.parts), one that fails
	// leaves its place to another free partition next round. After a node
	// loss every lease lapses at once and an R3 consumer takes up to a
	// raft election to create; takes one after another (each up to 5 s
	// when a request went unanswered) left partitions unowned for 10-20 s.
	for _, p := range free[:min(len(free), max(target-len(mine), 0))] {
		if ctx.Err() != nil {
			return
		}
		go w.take(ctx, p)
	}
}

func int64cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// take acquires partition p and starts running it; nil if it could not.
func (w *Worker) take(ctx context.Context, p int) *partition {
	w.mu.Lock()
	if w.draining || w.parts[p] != nil {
		w.mu.Unlock()
		return nil
	}
	pt := newPartition(w, p)
	w.parts[p] = pt
	w.wg.Add(1)
	w.mu.Unlock()
	if err := pt.take(ctx); err != nil {
		w.mu.Lock()
		delete(w.parts, p)
		w.mu.Unlock()
		w.wg.Done()
		if ctx.Err() == nil && !isHeld(err) {
			w.log.Warn().Err(err).Int("partition", p).Msg("could not take partition")
		}
		return nil
	}
	w.taken.Add(1)
	w.mu.Lock()
	if w.draining {
		pt.drain()
	}
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		pt.run()
	}()
	return pt
}

// forget removes a partition that is being given back or was lost.
func (w *Worker) forget(p *partition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.parts[p.p] == p {
		delete(w.parts, p.p)
	}
}

// acquireSlot waits for one of the MaxSessions slots; a wait is counted
// and logged (at most once a second), never silent. It returns false if
// ctx ends first.
func (w *Worker) acquireSlot(ctx context.Context, session string) bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
	}
	w.waits.Add(1)
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	now := time.Now().UnixNano()
	if last := w.lastFull.Load(); now-last > int64(time.Second) && w.lastFull.CompareAndSwap(last, now) {
		w.log.Warn().Int("max_sessions", w.cfg.MaxSessions).Int64("waiting", w.waiting.Load()).Uint64("waits", w.waits.Load()).Str("session", session).
			Msg("worker full: sessions with work wait for a free slot (MaxSessions); their requests stay held in order")
	}
	select {
	case w.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Worker) releaseSlot() { <-w.slots }

// newRuntime builds the runtime of a confirmed session from the template.
// h is the confirmed history the session was loaded with: with it the
// runtime reconciles each task's tool_calls count with the log and may
// then write counts of tasks without a limit off the call path.
func (w *Worker) newRuntime(id string, lg worker.Appender, h []schema.Event) (*worker.Runtime, error) {
	rc := w.cfg.Runtime
	rc.Session, rc.Log, rc.Registry, rc.Plans, rc.Budget, rc.History = id, lg, w.cfg.Registry, w.plans, w.budget, h
	rc.Logger = w.log
	if rc.Approvals == nil {
		rc.Approvals = w.topo.Approvals()
	}
	return worker.New(rc)
}

// decodeRequest decodes and checks a tool request from the subject of
// session id with schema.DecodeRequest, which holds it to
// request.schema.json and refuses duplicate member names.
func decodeRequest(id string, data []byte) (schema.Request, error) {
	r, err := schema.DecodeRequest(data)
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if r.Session != id {
		return r, fmt.Errorf("%w: request for session %q published on %q's subject", ErrInvalidRequest, r.Session, id)
	}
	return r, nil
}

// decodePlan decodes a plan from the subject of session id.
func decodePlan(id string, data []byte) (schema.Plan, error) {
	var p schema.Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return p, err
	}
	if p.PlanID == "" || p.Session != id {
		return p, fmt.Errorf("plan %q for session %q on %q's subject", p.PlanID, p.Session, id)
	}
	return p, nil
}

// stopping reports whether Run's context has ended (the drain started).
func (w *Worker) stopping() bool {
	d := w.runDone.Load()
	if d == nil {
		return false
	}
	select {
	case <-*d:
		return true
	default:
		return false
	}
}
