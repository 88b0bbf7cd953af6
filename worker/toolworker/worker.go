package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// Worker is a tool worker: it owns sessions through their leases and runs
// their requests and retry plans (see the package documentation). Build it
// with New and call Run once. Its methods are safe for concurrent use.
type Worker struct {
	cfg    Config
	topo   *stream.Topology
	log    zerolog.Logger
	plans  *stream.Plans
	budget *stream.Budget
	ttl    time.Duration

	running atomic.Bool

	mu        sync.Mutex
	sessions  map[string]*session // owned (or being taken)
	failures  map[string]failure  // sessions that could not be taken, and when to try again
	draining  bool
	hardStop  context.Context // cancelled when the drain times out
	hardAbort context.CancelFunc
	wg        sync.WaitGroup // session goroutines
}

// New returns a worker for cfg (after WithDefaults). It fails with
// ErrInvalidConfig naming a missing or invalid field.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		topo:     cfg.Topology,
		log:      cfg.Logger.With().Str("owner", cfg.Owner).Logger(),
		plans:    stream.NewPlans(cfg.Topology.Plans),
		budget:   stream.NewBudget(cfg.Topology.Budget),
		ttl:      cfg.Topology.Config().LeaseTTL,
		sessions: make(map[string]*session),
		failures: make(map[string]failure),
	}
	w.hardStop, w.hardAbort = context.WithCancel(context.Background())
	return w, nil
}

// Owner returns the worker's owner id (as written in leases and fences).
func (w *Worker) Owner() string { return w.cfg.Owner }

// Owned returns the sessions the worker owns right now, sorted.
func (w *Worker) Owned() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.sessions))
	for id, s := range w.sessions {
		if s.ready.Load() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// requestConsumerName is the per-session consumer on JW_REQUESTS.
func (w *Worker) requestConsumerName(session string) string {
	return w.topo.StreamName("req_" + session)
}

// Run runs the worker until ctx is cancelled, then drains (see the package
// documentation) and returns nil. It serves jw.api.call (its Gateway)
// unless Config.DisableGateway is set. It returns an error if it cannot set
// up its subscription, plan consumer or gateway. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.hardAbort()

	// Hints: every published request names its session.
	hints := make(chan string, 1024)
	sub, err := w.topo.JS.Conn().Subscribe(w.topo.RequestsSubject("*"), func(m *nats.Msg) {
		select {
		case hints <- stream.SessionOf(m.Subject):
		default: // the poll finds it
		}
	})
	if err != nil {
		return fmt.Errorf("toolworker: subscribe to requests: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	pcons, err := w.topo.PlanLog.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       w.topo.PlanConsumerName(),
		Description:   "jingwei tool workers: retry plans to execute",
		FilterSubject: w.topo.PlansSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("toolworker: plan consumer: %w", err)
	}
	stopGateway := func() {}
	if !w.cfg.DisableGateway {
		gw, err := NewGateway(GatewayConfig{Topology: w.topo, CallTimeout: w.cfg.CallTimeout, Owner: w.cfg.Owner, Logger: w.log})
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
		stopGateway = func() { once.Do(func() { _ = svc.Stop() }) }
		defer stopGateway()
	}
	w.log.Info().Int("max_sessions", w.cfg.MaxSessions).Dur("lease_ttl", w.ttl).Msg("tool worker running")

	acons, err := w.approvalConsumer(ctx)
	if err != nil {
		return fmt.Errorf("toolworker: approval consumer: %w", err)
	}
	var loops sync.WaitGroup
	loops.Add(3)
	go func() { defer loops.Done(); w.consumeApprovals(ctx, acons) }()
	go func() { defer loops.Done(); w.discover(ctx, hints) }()
	go func() { defer loops.Done(); w.consumePlans(ctx, pcons) }()
	<-ctx.Done()
	stopGateway()
	loops.Wait()

	// Drain: no new work; running bodies finish, then leases are released.
	w.mu.Lock()
	w.draining = true
	for _, s := range w.sessions {
		s.drain()
	}
	w.mu.Unlock()
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

// discover takes sessions with waiting requests: on a hint, and on every
// poll of the request stream's per-subject counts.
func (w *Worker) discover(ctx context.Context, hints <-chan string) {
	tick := time.NewTicker(w.cfg.PollInterval)
	defer tick.Stop()
	w.poll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-hints:
			w.tryTake(ctx, s)
		case <-tick.C:
			w.poll(ctx)
		}
	}
}

// poll tries to take every session that has requests waiting.
func (w *Worker) poll(ctx context.Context) {
	info, err := w.topo.Requests.Info(ctx, jetstream.WithSubjectFilter(w.topo.RequestsSubject("*")))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("poll of waiting requests failed")
		}
		return
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if n > 0 {
			subjects = append(subjects, subj)
		}
	}
	slices.Sort(subjects)
	for _, subj := range subjects {
		if ctx.Err() != nil {
			return
		}
		w.tryTake(ctx, stream.SessionOf(subj))
	}
}

// owned returns the session if the worker owns it and it is running, else
// nil.
func (w *Worker) owned(id string) *session {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.sessions[id]; s != nil && s.ready.Load() && !s.closing {
		return s
	}
	return nil
}

// tryTake takes the session if nobody owns it and the worker has room. It
// returns the session when the worker owns it (already or now), else nil.
func (w *Worker) tryTake(ctx context.Context, id string) *session {
	if !schema.ValidSession(id) {
		return nil
	}
	w.mu.Lock()
	if s := w.sessions[id]; s != nil {
		live := s.ready.Load() && !s.closing
		w.mu.Unlock()
		if live {
			return s
		}
		return nil // being taken or given back
	}
	if w.draining || len(w.sessions) >= w.cfg.MaxSessions {
		w.mu.Unlock()
		return nil
	}
	if f, ok := w.failures[id]; ok && time.Now().Before(f.next) {
		w.mu.Unlock()
		return nil
	}
	s := &session{w: w, id: id, plans: make(chan planJob, 64), drainc: make(chan struct{}), ctl: make(chan func(), 64)}
	w.sessions[id] = s
	w.wg.Add(1)
	w.mu.Unlock()

	if err := s.take(ctx); err != nil {
		held := errors.Is(err, stream.ErrLeaseHeld)
		w.mu.Lock()
		delete(w.sessions, id)
		var f failure
		if !held && ctx.Err() == nil {
			// Every attempt appends a session.fenced event: back off.
			f = w.failures[id].again()
			w.failures[id] = f
		}
		w.mu.Unlock()
		w.wg.Done()
		if !held && ctx.Err() == nil {
			w.log.Warn().Err(err).Str("session", id).Dur("retry_in", f.wait).Msg("could not take session")
		}
		return nil
	}
	w.mu.Lock()
	delete(w.failures, id)
	if w.draining {
		s.drain()
	}
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		s.run()
	}()
	return s
}

// backOff keeps the worker from taking the session again for a while:
// taking it did not lead anywhere (its log could not be fenced and loaded)
// and every attempt appends a session.fenced event.
func (w *Worker) backOff(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures[id] = w.failures[id].again()
}

// failure is a session that could not be taken (its history is over the
// limits or corrupt, the server refused a consumer): it is tried again after
// wait, which doubles from 1 s up to 5 minutes.
type failure struct {
	wait time.Duration
	next time.Time
}

func (f failure) again() failure {
	f.wait = min(max(2*f.wait, time.Second), 5*time.Minute)
	f.next = time.Now().Add(f.wait)
	return f
}

// forget removes a session that is being given back; work routed to it
// after this goes elsewhere.
func (w *Worker) forget(s *session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.closing = true
	if w.sessions[s.id] == s {
		delete(w.sessions, s.id)
	}
}

// planJob is a plan waiting to run on its session.
type planJob struct {
	plan schema.Plan
	msg  jetstream.Msg
}

// consumePlans routes every plan to its session's owner in this process,
// taking the session if nobody owns it; plans for sessions owned elsewhere
// are negatively acknowledged with PlanRetryDelay.
func (w *Worker) consumePlans(ctx context.Context, cons jetstream.Consumer) {
	// One plan at a time and no prefetch: a plan this worker has not
	// looked at is never held back from the others.
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		m, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn().Err(err).Msg("fetch of next plan failed")
				select {
				case <-ctx.Done():
				case <-time.After(w.cfg.PlanRetryDelay):
				}
			}
			continue
		}
		w.routePlan(ctx, m)
	}
}

func (w *Worker) routePlan(ctx context.Context, m jetstream.Msg) {
	id := stream.SessionOf(m.Subject())
	var p schema.Plan
	if err := json.Unmarshal(m.Data(), &p); err != nil || p.PlanID == "" || p.Session != id {
		w.log.Warn().Err(err).Str("session", id).Str("plan_id", p.PlanID).Msg("malformed plan dropped")
		_ = m.TermWithReason("malformed plan")
		return
	}
	// A plan that is spent needs no session — unless its attempt may never
	// have reached the log, which the session's owner completes (see
	// worker.TakeOperation).
	if rec, err := w.plans.Get(ctx, p.PlanID); err == nil && rec.State == stream.PlanConsumed && rec.CompletedEpoch > 0 {
		w.log.Debug().Str("session", id).Str("plan_id", p.PlanID).Msg("plan already consumed")
		_ = m.Ack()
		return
	}
	s := w.owned(id)
	if s == nil {
		s = w.tryTake(ctx, id)
	}
	if s == nil || !s.queuePlan(planJob{plan: p, msg: m}) {
		_ = m.NakWithDelay(w.cfg.PlanRetryDelay)
	}
}

// newRuntime builds the runtime of an owned session from the template. h is
// the confirmed history the session was loaded with after the fence: with
// it the runtime reconciles each task's tool_calls count with the log and
// may then write counts of tasks without a limit off the call path.
func (w *Worker) newRuntime(id string, lg worker.Appender, h []schema.Event) (*worker.Runtime, error) {
	rc := w.cfg.Runtime
	rc.Session, rc.Log, rc.Registry, rc.Plans, rc.Budget, rc.History = id, lg, w.cfg.Registry, w.plans, w.budget, h
	rc.Logger = w.log
	if rc.Approvals == nil {
		rc.Approvals = w.topo
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
