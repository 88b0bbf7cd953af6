package toolworker

import (
	"context"
	"errors"
	"fmt"
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

// fetchWait bounds one pull for the next request of a session.
const fetchWait = 5 * time.Second

// ackTimeout bounds the acknowledgement of a request or plan.
const ackTimeout = 5 * time.Second

// session is one session the worker owns: its lease hold, its fenced log
// behind the hold's guard (stream.Takeover), its runtime and its request
// consumer. One goroutine (run) runs
// its requests and plans one at a time.
type session struct {
	w      *Worker
	id     string
	log    zerolog.Logger
	plans  chan planJob
	drainc chan struct{}
	once   sync.Once

	closing bool        // guarded by w.mu: no more work is routed here
	ready   atomic.Bool // taken: lease, fence, history, consumer in place

	hold *stream.LeaseHold
	rt   *worker.Runtime
	cons jetstream.Consumer
	// work is the context of calls and bodies: cancelled when the session
	// is lost, or when the drain times out.
	work       context.Context
	cancelWork context.CancelFunc
	// failed is set when the session must be given back although it is
	// still ours (the log could not be written).
	failed atomic.Bool

	mu   sync.Mutex
	seen map[string]struct{} // request ids recorded in the log
	cur  *job                // the call in progress

	// ctl runs work in the session goroutine (approvals, their timer;
	// approval.go); deadline is the session's one approval timer.
	ctl      chan func()
	tmu      sync.Mutex
	deadline *time.Timer
}

// job is a request or plan whose tool.call is not yet known to be recorded.
type job struct {
	requestID string
	planID    string
	msg       jetstream.Msg
	acked     bool
}

func (s *session) drain() { s.once.Do(func() { close(s.drainc) }) }

// take acquires the session: its lease (held with the lease-clock guard,
// stream.HoldLease) and its request consumer. The log is fenced only when
// there is something to record (confirm): a request that cannot become a
// call is answered without touching the log.
func (s *session) take(ctx context.Context) error {
	w := s.w
	s.log = w.log.With().Str("session", s.id).Logger()
	s.work, s.cancelWork = context.WithCancel(w.hardStop)
	hold, err := w.topo.HoldLease(ctx, s.id, w.cfg.Owner, s.lost)
	if err != nil {
		s.cancelWork()
		return err
	}
	s.hold = hold
	s.seen = make(map[string]struct{})
	if err := s.openConsumer(ctx); err != nil {
		s.cancelWork()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		_ = hold.Release(rctx)
		return err
	}
	s.ready.Store(true)
	s.log.Info().Uint64("epoch", hold.Epoch()).Msg("session taken")
	return nil
}

// confirm fences the session log at the lease's epoch and loads the
// confirmed history, once, before the first call is recorded: from then
// on older writers cannot append, and the runtime knows what the log
// holds. A log with no room even for a fence returns stream.ErrLogClosed.
func (s *session) confirm(ctx context.Context) error {
	if s.rt != nil {
		return nil
	}
	tk, err := s.w.topo.Confirm(ctx, s.hold)
	if err != nil {
		return fmt.Errorf("fence and load: %w", err)
	}
	h := tk.History
	s.mu.Lock()
	for i := range h {
		if c := h[i].Call; c != nil && c.RequestID != "" {
			s.seen[c.RequestID] = struct{}{}
		}
	}
	seen := len(s.seen)
	s.mu.Unlock()
	rt, err := s.w.newRuntime(s.id, recordingLog{GuardedLog: tk.Log, onCall: s.recorded}, h)
	if err != nil {
		return err
	}
	s.rt = rt
	s.log.Info().Uint64("epoch", s.hold.Epoch()).Int("events", len(h)).Int("requests_seen", seen).Msg("session log fenced and loaded")
	s.confirmed()
	return nil
}

// openConsumer replaces whatever request consumer a previous owner left
// (its unacknowledged request becomes deliverable again at once) with this
// owner's: filtered on the session, one request in flight.
func (s *session) openConsumer(ctx context.Context) error {
	w := s.w
	name := w.requestConsumerName(s.id)
	if err := w.topo.Requests.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete old request consumer %s: %w", name, err)
	}
	cons, err := w.topo.Requests.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:           name,
		Description:       "jingwei tool worker " + w.cfg.Owner,
		FilterSubject:     w.topo.RequestsSubject(s.id),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           w.cfg.AckWait,
		MaxAckPending:     1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: max(5*time.Minute, 4*w.cfg.IdleTimeout),
	})
	if err != nil {
		return fmt.Errorf("create request consumer %s: %w", name, err)
	}
	s.cons = cons
	return nil
}

// lost is called once when the session's hold ends (not when it is
// released).
func (s *session) lost(err error) {
	s.cancelWork()
	if !errors.Is(err, errGivenBack) {
		s.log.Warn().Err(err).Msg("session lost; not touching it any more")
	}
}

// recorded runs after a tool.call is acknowledged by the log: it
// acknowledges the request or plan that caused it and remembers its
// request id.
func (s *session) recorded(c *schema.Call) {
	s.mu.Lock()
	if c.RequestID != "" {
		s.seen[c.RequestID] = struct{}{}
	}
	j := s.cur
	match := j != nil && !j.acked &&
		(j.requestID != "" && c.RequestID == j.requestID ||
			j.planID != "" && c.Operation != nil && c.Operation.Retry != nil && c.Operation.Retry.PlanID == j.planID)
	if match {
		j.acked = true
	}
	s.mu.Unlock()
	if match {
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		if err := j.msg.DoubleAck(ctx); err != nil {
			// Redelivered later, it is found in the log and not run again.
			s.log.Warn().Err(err).Str("call_id", c.CallID).Msg("acknowledgement failed")
		}
	}
}

func (s *session) hasSeen(requestID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[requestID]
	return ok
}

func (s *session) setCur(j *job) {
	s.mu.Lock()
	s.cur = j
	s.mu.Unlock()
}

// queuePlan queues a plan behind the session's current work; false if the
// session is going away or the queue is full.
func (s *session) queuePlan(j planJob) bool {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.closing || !s.ready.Load() {
		return false
	}
	select {
	case s.plans <- j:
		return true
	default:
		return false
	}
}

// run runs the session's requests and plans, one at a time, until it is
// drained, idle, lost or failed, then gives it back.
func (s *session) run() {
	renewCtx, stopRenew := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { defer close(renewed); s.renew(renewCtx) }()

	fetchCtx, stopFetch := context.WithCancel(s.work)
	reqs := make(chan jetstream.Msg)
	next := make(chan struct{}, 1)
	next <- struct{}{}
	fetchErr := make(chan error, 1)
	fetched := make(chan struct{})
	go func() { defer close(fetched); s.fetch(fetchCtx, reqs, next, fetchErr) }()

	idle := time.NewTimer(s.w.cfg.IdleTimeout)
	defer idle.Stop()
	reason := "drained"
loop:
	for {
		select {
		case <-s.drainc:
			break loop
		default:
		}
		select {
		case <-s.drainc:
			break loop
		case <-s.work.Done():
			reason = "stopped"
			break loop
		case <-idle.C:
			if s.waiting() {
				idle.Reset(s.w.cfg.IdleTimeout)
				continue
			}
			reason = "idle"
			break loop
		case f := <-s.ctl:
			f()
		case err := <-fetchErr:
			reason = "request consumer gone: " + err.Error()
			break loop
		case m := <-reqs:
			s.runRequest(m)
			next <- struct{}{}
		case p := <-s.plans:
			s.runPlan(p)
		}
		if s.hold.Err() != nil || s.failed.Load() {
			reason = "lost or failed"
			break loop
		}
		s.armDeadline()
		idle.Reset(s.w.cfg.IdleTimeout)
	}
	stopFetch()
	<-fetched
	s.w.forget(s)
	for {
		select {
		case p := <-s.plans:
			_ = p.msg.NakWithDelay(s.w.cfg.PlanRetryDelay)
			continue
		default:
		}
		break
	}
	stopRenew()
	<-renewed
	s.giveBack(reason)
}

// giveBack deletes the request consumer and releases the lease, if the
// session is still ours.
func (s *session) giveBack(reason string) {
	defer s.cancelWork()
	if s.hold.Err() != nil {
		s.log.Info().Str("reason", reason).Msg("session dropped (lost)")
		return
	}
	s.hold.Lose(errGivenBack) // no more appends
	lease := s.hold.Lease()
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	// Only a live lease entitles the worker to touch the consumer: a new
	// owner has one of the same name.
	if err := lease.Renew(ctx); err != nil {
		s.log.Info().Err(err).Str("reason", reason).Msg("session dropped (lease gone)")
		return
	}
	if err := s.w.topo.Requests.DeleteConsumer(ctx, s.w.requestConsumerName(s.id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Warn().Err(err).Msg("could not delete request consumer")
	}
	// Write the session's deferred tool_calls counts before the session
	// goes (a next owner would reconcile them from the log, but a session
	// nobody takes again would keep a low count until then).
	if s.rt != nil {
		if err := s.rt.Flush(ctx); err != nil {
			s.log.Warn().Err(err).Msg("could not write deferred budget counts")
		}
	}
	if err := lease.Release(ctx); err != nil {
		s.log.Warn().Err(err).Msg("could not release lease")
	}
	s.log.Info().Str("reason", reason).Msg("session given back")
}

// renew renews the lease every RenewInterval until ctx ends; a lost lease,
// or one that could not be renewed within its TTL, ends the hold
// (LeaseHold.Renew), which loses the session.
func (s *session) renew(ctx context.Context) {
	t := time.NewTicker(s.w.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, s.w.cfg.RenewInterval)
		err := s.hold.Renew(rctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil || s.hold.Err() != nil:
			return
		default:
			s.log.Warn().Err(err).Msg("lease renewal failed")
		}
	}
}

// fetch pulls the session's next request whenever the run loop is ready
// for one (a token on next).
func (s *session) fetch(ctx context.Context, reqs chan<- jetstream.Msg, next <-chan struct{}, errc chan<- error) {
	for {
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
		for {
			fctx, cancel := context.WithTimeout(ctx, fetchWait)
			m, err := s.cons.Next(jetstream.FetchContext(fctx))
			cancel()
			if err == nil {
				select {
				case reqs <- m:
				case <-ctx.Done():
					_ = m.Nak() // for the next owner, at once
					return
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				errc <- err
				return
			}
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Debug().Err(err).Msg("fetch of next request failed")
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

// runRequest runs one request unless its id is already in the log. A
// request that can never become a call (malformed, an unknown tool, too
// large to record, a full session log) gets a durable answer on
// jw.answers.<session> and is terminated, before anything touches the
// session log: no fence, no count, no retry.
func (s *session) runRequest(m jetstream.Msg) {
	r, err := decodeRequest(s.id, m.Data())
	if err != nil {
		s.refuse(m, r, schema.CodeInvalidRequest, err)
		return
	}
	lg := s.log.With().Str("request_id", r.RequestID).Str("tool", r.Tool).Logger()
	if _, ok := s.w.cfg.Registry.Lookup(r.Tool); !ok {
		s.refuse(m, r, schema.CodeUnknownTool, fmt.Errorf("no tool %q is registered with this worker", r.Tool))
		return
	}
	if err := r.Fits(int(s.w.topo.JS.Conn().MaxPayload())); err != nil {
		s.refuse(m, r, schema.CodeRequestTooLarge, err)
		return
	}
	if err := s.confirm(s.work); err != nil {
		if code := unrecordable(err); code != "" {
			// The log can never record a call (full, corrupt): every
			// request of the session is answered so.
			s.refuse(m, r, code, err)
			return
		}
		lg.Warn().Err(err).Msg("session log not confirmed; request left for redelivery")
		_ = m.Nak()
		s.failed.Store(true)
		s.w.backOff(s.id)
		return
	}
	if s.hasSeen(r.RequestID) {
		lg.Info().Msg("request already in the log; acknowledged, not run again")
		_ = m.Ack()
		return
	}
	if s.hold.Err() != nil {
		_ = m.Nak()
		return
	}
	j := &job{requestID: r.RequestID, msg: m}
	s.setCur(j)
	res, err := s.rt.CallWithOptions(s.work, r.Tool, r.Arguments, worker.CallOptions{
		Task: r.Task, RequestID: r.RequestID, ProviderCallID: r.ProviderCallID,
	})
	s.setCur(nil)
	s.settle(lg, j, res, err)
}

// refuse answers a request that cannot become a call (code and why) on
// jw.answers.<session> and terminates it. A request whose answer cannot be
// recorded is left for redelivery.
func (s *session) refuse(m jetstream.Msg, r schema.Request, code schema.Code, why error) {
	lg := s.log.With().Str("request_id", r.RequestID).Str("tool", r.Tool).Str("code", string(code)).Logger()
	if r.RequestID == "" {
		// Not even a request id to answer under: nobody can be waiting
		// for it by id; the message is dropped with its reason.
		lg.Warn().Err(why).Msg("request without a usable request id terminated")
		_ = m.TermWithReason(why.Error())
		return
	}
	ctx, cancel := context.WithTimeout(s.work, ackTimeout)
	defer cancel()
	msg := schema.TextOf(why)
	err := s.w.topo.PublishAnswer(ctx, schema.Answer{Session: s.id, RequestID: r.RequestID, Code: code, Message: msg, At: time.Now().UTC()})
	if err != nil {
		lg.Warn().Err(err).Msg("answer not recorded; request left for redelivery")
		_ = m.Nak()
		return
	}
	lg.Info().Str("reason", msg).Msg("request refused and answered")
	_ = m.TermWithReason(string(code) + ": " + msg)
}

// runPlan runs one retry plan on the session.
func (s *session) runPlan(p planJob) {
	if err := s.confirm(s.work); err != nil {
		s.log.Warn().Err(err).Str("plan_id", p.plan.PlanID).Msg("session log not confirmed; plan left for redelivery")
		_ = p.msg.NakWithDelay(s.w.cfg.PlanRetryDelay)
		s.failed.Store(true)
		s.w.backOff(s.id)
		return
	}
	if s.hold.Err() != nil {
		_ = p.msg.NakWithDelay(s.w.cfg.PlanRetryDelay)
		return
	}
	lg := s.log.With().Str("plan_id", p.plan.PlanID).Str("tool", p.plan.Tool).Logger()
	j := &job{planID: p.plan.PlanID, msg: p.msg}
	s.setCur(j)
	plan := p.plan
	res, err := s.rt.CallWithOptions(s.work, plan.Tool, plan.Arguments, worker.CallOptions{Task: plan.Task, Retry: &plan})
	s.setCur(nil)
	s.mu.Lock()
	acked := j.acked
	s.mu.Unlock()
	if !acked && (errors.Is(err, schema.ErrPlanRefused) || errors.Is(err, schema.ErrTaskStopped)) {
		lg.Info().Err(err).Msg("plan refused; not attempted")
		_ = p.msg.Ack()
		return
	}
	s.settle(lg, j, res, err)
}

// settle finishes a job: a job whose tool.call was recorded is done (it was
// acknowledged then); one that cannot become a call is terminated; any other
// is handed back for redelivery, and the session is given back if the log
// failed.
func (s *session) settle(lg zerolog.Logger, j *job, res worker.Result, err error) {
	s.mu.Lock()
	acked := j.acked
	s.mu.Unlock()
	if acked {
		ev := lg.Info().Str("call_id", res.CallID).Str("status", string(res.Status))
		if res.Stage != "" {
			ev = ev.Str("stage", string(res.Stage))
		}
		ev.Msg("call done")
		if c := schema.CodeOf(err); c == schema.CodeLog || c == schema.CodeFenced {
			s.failed.Store(true)
		}
		return
	}
	switch code := schema.CodeOf(err); {
	case code == schema.CodeUnknownTool || code == schema.CodeInvalidCall:
		lg.Warn().Err(err).Msg("terminated: cannot become a call")
		_ = j.msg.TermWithReason(err.Error())
		return
	case j.requestID != "" && permanent(err) != "":
		// The log refuses this call for good (too large, full): no retry
		// loop, an answer.
		var r schema.Request
		if d, derr := decodeRequest(s.id, j.msg.Data()); derr == nil {
			r = d
		}
		s.refuse(j.msg, r, permanent(err), err)
		return
	}
	// Nothing known to be recorded: the next owner decides from the
	// confirmed history (a tool.call whose acknowledgement was lost is
	// found there and not run again).
	lg.Warn().Err(err).Msg("call not recorded; left for redelivery")
	_ = j.msg.Nak()
	if s.hold.Err() == nil {
		s.failed.Store(true)
	}
}

// permanent returns the answer code of an error the session log will
// return every time for this call (the event is over a limit, or the log
// is full), or "" for an error that may pass (a timeout, a lost
// connection, a fence).
func permanent(err error) schema.Code {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return schema.CodeRequestTooLarge
	case errors.Is(err, schema.ErrHistoryTooLarge):
		return schema.CodeHistoryTooLarge
	case errors.Is(err, schema.ErrFieldTooLong), errors.Is(err, schema.ErrCorruptHistory):
		return schema.CodeRequestTooLarge
	case errors.Is(err, schema.ErrTaskStopped):
		return schema.CodeTaskStopped
	}
	return ""
}

// unrecordable returns the answer code for a session log that can never
// record a call — full (history_too_large: over the limit, or no room even
// for a fence) or corrupt (corrupt_history) — or "" for a failure that may
// pass.
func unrecordable(err error) schema.Code {
	switch {
	case errors.Is(err, stream.ErrLogClosed), errors.Is(err, schema.ErrHistoryTooLarge):
		return schema.CodeHistoryTooLarge
	case errors.Is(err, schema.ErrCorruptHistory):
		return schema.CodeCorruptHistory
	}
	return ""
}

// recordingLog is a session's appender: the takeover's guarded log, with
// every tool.call the log acknowledged reported to onCall.
type recordingLog struct {
	*stream.GuardedLog
	onCall func(*schema.Call)
}

// Append appends ev and reports a recorded tool.call.
func (l recordingLog) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	seq, err := l.GuardedLog.Append(ctx, ev)
	if err == nil && ev.Type == schema.TypeCall && ev.Call != nil {
		l.onCall(ev.Call)
	}
	return seq, err
}
