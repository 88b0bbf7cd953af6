package toolworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// ackTimeout bounds the acknowledgement of a request or plan.
const ackTimeout = 5 * time.Second

// item is a request or plan message held for its session, or (fn set)
// work run in the session's goroutine: an approval answer or task stop
// (msg is its message, nil for the approval timer), see approval.go.
type item struct {
	msg  jetstream.Msg
	plan bool
	fn   func(*session)
}

// session is one session of an owned partition, held in memory while it
// has work or had some within IdleTimeout: its queue of held messages (in
// stream order), its confirmed log and runtime once a call had to be
// recorded. It keeps no logger of its own (a held session costs no log
// context): log lines name the session. One goroutine (run) runs its items one at a time.
type session struct {
	p  *partition
	w  *Worker
	id string

	// guarded by p.mu
	queue  []item
	active bool // run is running (or about to)
	last   time.Time

	// owned by the run goroutine
	rt       *worker.Runtime
	hold     stream.Hold // the session's hold, from its confirm
	failures int

	mu sync.Mutex
	// seen holds the request ids recorded in the log, each with the
	// digest of the request its call carries (what the id is bound to,
	// request_bind.go): a slice while small (most sessions record a few
	// calls), a map from seenMap on.
	seen    []seenRequest
	seenSet map[string]requestDigest
	cur     *job // the call in progress

	// deadline is the session's one approval timer (approval.go), set by
	// the run goroutine; parked says calls of the session wait for
	// approval, so it is not dropped from memory for being idle.
	tmu      sync.Mutex
	deadline *time.Timer
	parked   atomic.Bool
}

func newSession(p *partition, id string) *session {
	return &session{p: p, w: p.w, id: id}
}

// job is a request or plan whose tool.call is not yet known to be recorded.
type job struct {
	requestID string
	planID    string
	msg       jetstream.Msg
	acked     bool
}

// run takes a slot and runs the session's items in order until none is
// left or the partition stops. An item whose call could not be recorded
// (a lost connection, a fence by another writer) stays first in the queue
// and is tried again after a backoff, so nothing of the session overtakes
// it.
func (s *session) run() {
	p := s.p
	if !s.w.acquireSlot(p.work, s.id) {
		p.mu.Lock()
		s.active = false
		p.mu.Unlock()
		return
	}
	defer s.w.releaseSlot()
	for {
		it, ok := p.next(s)
		if !ok {
			return
		}
		if s.process(it) {
			s.failures = 0
			continue
		}
		p.requeue(s, it)
		s.failures++
		s.rt, s.hold = nil, nil // confirm again before the next attempt
		wait := min(time.Duration(1<<min(s.failures, 6))*50*time.Millisecond, 5*time.Second)
		select {
		case <-p.work.Done():
		case <-time.After(wait):
		}
		if p.work.Err() != nil {
			p.mu.Lock()
			s.active = false
			p.mu.Unlock()
			return
		}
	}
}

// process runs one item; false if it must be tried again (nothing known
// to be recorded, nothing answered).
func (s *session) process(it item) bool {
	if it.fn != nil {
		it.fn(s)
		return true
	}
	defer s.armDeadline()
	if it.plan {
		return s.runPlan(it.msg)
	}
	return s.runRequest(it.msg)
}

// confirm fences the session log at the partition's epoch (or resumes it,
// if the log already ends with this owner's own event at that epoch) and
// loads the confirmed history, before the first call is recorded: from
// then on older writers cannot append, and the runtime knows what the log
// holds. A log with no room even for a fence returns stream.ErrLogClosed.
func (s *session) confirm(ctx context.Context) error {
	if s.rt != nil && s.hold.Err() == nil {
		return nil
	}
	s.rt, s.hold = nil, nil
	tctx, endSpan := startConfirmSpan(ctx, s.id)
	tk, err := s.w.topo.Leases().ConfirmIn(tctx, s.p.hold, s.id)
	if err == nil && tk.Resumed && leftOpen(tk.History) {
		// The log ends with this hold's own events and one of its calls
		// is still open, though nothing here runs it any more (its
		// tool.result was not recorded: the log was out of reach for
		// longer than the runtime tried). Resumed, it would stay open
		// for good with the session held, and no recovery worker would
		// ever assess it: fence the session above it instead, which
		// closes it for assessment (uncertain: it may have run).
		var epoch uint64
		if epoch, err = s.p.hold.Raise(tctx, tk.Hold.Epoch()); err == nil {
			s.p.log.Warn().Str("session", s.id).Uint64("epoch", epoch).Msg("a call of this worker's was left open without its result: session fenced above it")
			tk, err = s.w.topo.Leases().ConfirmIn(tctx, s.p.hold, s.id)
		}
	}
	endSpan(tctx, tk, err)
	if err != nil {
		return fmt.Errorf("fence and load: %w", err)
	}
	h := tk.History
	s.mu.Lock()
	s.seen, s.seenSet = nil, nil
	for i := range h {
		if c := h[i].Call; c != nil && c.RequestID != "" {
			s.addSeen(c.RequestID, digestOfCall(c))
		}
	}
	seen := s.seenCount()
	s.mu.Unlock()
	rt, err := s.w.newRuntime(s.id, recordingLog{GuardedLog: tk.Log, onCall: s.recorded}, h)
	if err != nil {
		return err
	}
	s.rt, s.hold = rt, tk.Hold
	s.p.log.Info().Str("session", s.id).Uint64("epoch", tk.Hold.Epoch()).Int("events", len(h)).Int("requests_seen", seen).Bool("resumed", tk.Resumed).Msg("session log confirmed")
	s.confirmed()
	return nil
}

// leftOpen reports whether a loaded history has a call open that no
// approval keeps waiting (recovery.OpenCalls: the open-call rule).
func leftOpen(h []schema.Event) bool {
	var o recovery.OpenCalls[struct{}]
	for _, ev := range h {
		o.Observe(ev, nil, nil)
	}
	open := false
	o.Each(func(id string, _ struct{}) { open = open || !o.Parked(id) })
	return open
}

// flush writes the session's deferred tool_calls counts.
func (s *session) flush(ctx context.Context) {
	if s.rt == nil {
		return
	}
	if err := s.rt.Flush(ctx); err != nil {
		s.p.log.Warn().Str("session", s.id).Err(err).Msg("could not write deferred budget counts")
	}
}

// recorded runs after a tool.call is acknowledged by the log: it
// acknowledges the request or plan that caused it and remembers its
// request id.
func (s *session) recorded(c *schema.Call) {
	var d requestDigest
	if c.RequestID != "" {
		d = digestOfCall(c)
	}
	s.mu.Lock()
	if c.RequestID != "" {
		s.addSeen(c.RequestID, d)
	}
	j := s.cur
	match := j != nil && !j.acked &&
		(j.requestID != "" && c.RequestID == j.requestID ||
			j.planID != "" && c.Operation != nil && c.Operation.Retry != nil && c.Operation.Retry.PlanID == j.planID)
	if match {
		j.acked = true
	}
	s.mu.Unlock()
	if match && j.requestID != "" {
		// A request's acknowledgement is not waited for: it only takes the
		// request out of the work queue, and one that is lost delivers
		// the request again, which the log's call answers without a run.
		// Waiting for the server's confirmation cost every call a round
		// trip between its tool.call and its body.
		if err := j.msg.Ack(); err != nil {
			s.p.log.Warn().Str("session", s.id).Err(err).Str("call_id", c.CallID).Msg("acknowledgement failed")
		}
		return
	}
	if match {
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		if err := j.msg.DoubleAck(ctx); err != nil {
			// Redelivered later, it is found in the log and not run again.
			s.p.log.Warn().Str("session", s.id).Err(err).Str("call_id", c.CallID).Msg("acknowledgement failed")
		}
	}
}

// seenAs returns the digest of the request the log's call with
// requestID carries; ok false if no call of the log carries it.
func (s *session) seenAs(requestID string) (d requestDigest, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seenSet != nil {
		d, ok = s.seenSet[requestID]
		return d, ok
	}
	if i := slices.IndexFunc(s.seen, func(r seenRequest) bool { return r.id == requestID }); i >= 0 {
		return s.seen[i].digest, true
	}
	return requestDigest{}, false
}

// seenMap is how many request ids the slice holds before they move to a
// map.
const seenMap = 16

// addSeen remembers a recorded request id and the digest of its call's
// request; the first call of the log with an id binds it. s.mu is held.
func (s *session) addSeen(id string, d requestDigest) {
	switch {
	case s.seenSet != nil:
		if _, ok := s.seenSet[id]; !ok {
			s.seenSet[id] = d
		}
	case len(s.seen) < seenMap:
		if !slices.ContainsFunc(s.seen, func(r seenRequest) bool { return r.id == id }) {
			s.seen = append(s.seen, seenRequest{id, d})
		}
	default:
		s.seenSet = make(map[string]requestDigest, 2*seenMap)
		for _, x := range s.seen {
			s.seenSet[x.id] = x.digest
		}
		if _, ok := s.seenSet[id]; !ok {
			s.seenSet[id] = d
		}
		s.seen = nil
	}
}

// seenCount returns how many request ids are remembered. s.mu is held.
func (s *session) seenCount() int {
	if s.seenSet != nil {
		return len(s.seenSet)
	}
	return len(s.seen)
}

func (s *session) setCur(j *job) {
	s.mu.Lock()
	s.cur = j
	s.mu.Unlock()
}

// runRequest runs one request unless its id is already in the log. A
// request that can never become a call (malformed, an unknown tool, too
// large to record, a full session log) gets a durable answer on
// jw.answers.<session> and is terminated, before anything touches the
// session log: no fence, no count, no retry. It returns false when the
// request must be tried again.
func (s *session) runRequest(m jetstream.Msg) bool {
	r, err := decodeRequest(s.id, m.Data())
	if err != nil {
		return s.refuse(m, r, schema.CodeInvalidRequest, err)
	}
	lg := s.p.log.With().Str("session", s.id).Str("request_id", r.RequestID).Str("tool", r.Tool).Logger()
	if _, ok := s.w.cfg.Registry.Lookup(r.Tool); !ok {
		return s.refuse(m, r, schema.CodeUnknownTool, fmt.Errorf("no tool %q is registered with this worker", r.Tool))
	}
	if err := r.Fits(int(s.w.topo.JS.Conn().MaxPayload())); err != nil {
		return s.refuse(m, r, schema.CodeRequestTooLarge, err)
	}
	if err := s.confirm(s.p.work); err != nil {
		if code := unrecordable(err); code != "" {
			// The log can never record a call (full, corrupt): every
			// request of the session is answered so.
			return s.refuse(m, r, code, err)
		}
		if s.p.work.Err() == nil {
			lg.Warn().Err(err).Msg("session log not confirmed; request held and tried again")
		}
		return false
	}
	if bound, ok := s.seenAs(r.RequestID); ok {
		return s.alreadyBound(lg, m, r, bound)
	}
	if s.hold.Err() != nil {
		return false
	}
	j := &job{requestID: r.RequestID, msg: m}
	s.setCur(j)
	ctx, endSpan := consumeSpan(s.p.work, m, spanRequest, s.id)
	lg = traceLog(ctx, lg)
	res, err := s.rt.CallWithOptions(ctx, r.Tool, r.Arguments, worker.CallOptions{
		Task: r.Task, RequestID: r.RequestID, ProviderCallID: r.ProviderCallID,
	})
	endSpan(res, err)
	s.setCur(nil)
	s.tellGatewayCall(m, r, res.CallSeq)
	return s.settle(lg, j, res, err)
}

// refuse answers a request that cannot become a call (code and why) on
// jw.answers.<session> and terminates it. A request whose answer cannot be
// recorded is tried again (false).
func (s *session) refuse(m jetstream.Msg, r schema.Request, code schema.Code, why error) bool {
	lg := s.p.log.With().Str("session", s.id).Str("request_id", r.RequestID).Str("tool", r.Tool).Str("code", string(code)).Logger()
	if r.RequestID == "" {
		// Not even a request id to answer under: nobody can be waiting
		// for it by id; the message is dropped with its reason.
		lg.Warn().Err(why).Msg("request without a usable request id terminated")
		_ = m.TermWithReason(why.Error())
		return true
	}
	ctx, cancel := context.WithTimeout(s.p.work, ackTimeout)
	defer cancel()
	msg := schema.TextOf(why)
	err := s.w.topo.Answers().PublishAnswer(ctx, schema.Answer{Session: s.id, RequestID: r.RequestID, Code: code, Message: msg, At: time.Now().UTC(), RequestDigest: stream.RequestDigestHex(r)})
	if err != nil {
		lg.Warn().Err(err).Msg("answer not recorded; request held and tried again")
		return false
	}
	lg.Info().Str("reason", msg).Msg("request refused and answered")
	s.tellGateway(m, r, 0)
	_ = m.TermWithReason(string(code) + ": " + msg)
	return true
}

// runPlan runs one retry plan on the session with
// worker.Runtime.CallWithOptions (CallOptions{Retry: plan}); the runtime
// verifies it and consumes it in jw_plans with a compare-and-set, so a
// plan delivered twice is attempted at most once.
func (s *session) runPlan(m jetstream.Msg) bool {
	plan, err := decodePlan(s.id, m.Data())
	if err != nil {
		s.p.log.Warn().Str("session", s.id).Err(err).Msg("malformed plan dropped")
		_ = m.TermWithReason("malformed plan")
		return true
	}
	lg := s.p.log.With().Str("session", s.id).Str("plan_id", plan.PlanID).Str("tool", plan.Tool).Logger()
	// A plan that is spent needs no session — unless its attempt may never
	// have reached the log, which the session's owner completes (see
	// worker.TakeOperation).
	ctx, cancel := context.WithTimeout(s.p.work, ackTimeout)
	rec, gerr := s.w.plans.Get(ctx, plan.PlanID)
	cancel()
	if gerr == nil && rec.State == stream.PlanConsumed && rec.CompletedEpoch > 0 {
		lg.Debug().Msg("plan already consumed")
		_ = m.Ack()
		return true
	}
	if err := s.confirm(s.p.work); err != nil {
		if code := unrecordable(err); code != "" {
			return s.dropPlan(lg, m, code, err)
		}
		if s.p.work.Err() == nil {
			lg.Warn().Err(err).Msg("session log not confirmed; plan held and tried again")
		}
		return false
	}
	if s.hold.Err() != nil {
		return false
	}
	j := &job{planID: plan.PlanID, msg: m}
	s.setCur(j)
	pctx, endSpan := consumeSpan(s.p.work, m, spanRetry, s.id)
	lg = traceLog(pctx, lg)
	res, err := s.rt.CallWithOptions(pctx, plan.Tool, plan.Arguments, worker.CallOptions{Task: plan.Task, Retry: &plan})
	endSpan(res, err)
	s.setCur(nil)
	s.mu.Lock()
	acked := j.acked
	s.mu.Unlock()
	if !acked && (errors.Is(err, schema.ErrPlanRefused) || errors.Is(err, schema.ErrTaskStopped)) {
		lg.Info().Err(err).Msg("plan refused; not attempted")
		_ = m.Ack()
		return true
	}
	if code := permanent(err); !acked && code != "" {
		return s.dropPlan(lg, m, code, err)
	}
	return s.settle(lg, j, res, err)
}

// dropPlan terminates a plan the session log can never record the attempt
// of (full, corrupt, the attempt too large): the plan is left unused in
// jw_plans and the session's queue goes on — held, it would be tried
// again forever while every request behind it waits unanswered.
func (s *session) dropPlan(lg zerolog.Logger, m jetstream.Msg, code schema.Code, why error) bool {
	lg.Warn().Err(why).Str("code", string(code)).Msg("plan not attempted: the session log cannot record its attempt; the plan is left unused")
	_ = m.TermWithReason(string(code) + ": " + schema.TextOf(why))
	return true
}

// settle finishes a job: a job whose tool.call was recorded is done (it was
// acknowledged then); one that cannot become a call is terminated; any other
// is tried again (false), after the session is confirmed again.
func (s *session) settle(lg zerolog.Logger, j *job, res worker.Result, err error) bool {
	s.mu.Lock()
	acked := j.acked
	s.mu.Unlock()
	if acked {
		ev := lg.Info().Str("call_id", res.CallID).Str("status", string(res.Status))
		if res.Stage != "" {
			ev = ev.Str("stage", string(res.Stage))
		}
		ev.Msg("call done")
		switch schema.CodeOf(err) {
		case schema.CodeFenced:
			s.rt, s.hold = nil, nil // confirm again before the next call
		case schema.CodeLog:
			// Recorded as started, its result not: confirmed again now,
			// not at the next request (there may be none), so that the
			// call left open is fenced for assessment (confirm).
			s.rt, s.hold = nil, nil
			s.resume()
		}
		return true
	}
	switch code := schema.CodeOf(err); {
	case code == schema.CodeUnknownTool || code == schema.CodeInvalidCall:
		lg.Warn().Err(err).Msg("terminated: cannot become a call")
		_ = j.msg.TermWithReason(err.Error())
		return true
	case j.requestID != "" && permanent(err) != "":
		// The log refuses this call for good (too large, full): no retry
		// loop, an answer.
		var r schema.Request
		if d, derr := decodeRequest(s.id, j.msg.Data()); derr == nil {
			r = d
		}
		return s.refuse(j.msg, r, permanent(err), err)
	}
	// Nothing known to be recorded: tried again once the session is
	// confirmed again (a tool.call whose acknowledgement was lost is found
	// in the confirmed history and not run again).
	if s.p.work.Err() == nil {
		lg.Warn().Err(err).Msg("call not recorded; held and tried again")
	}
	return false
}

// permanent returns the answer code of an error the session log will
// return every time for this call (the event is over a limit, or the log
// is full), or "" for an error that may pass (a timeout, a lost
// connection, a fence).
func permanent(err error) schema.Code {
	switch {
	case errors.Is(err, schema.ErrTaskStopped):
		return schema.CodeTaskStopped
	case errors.Is(err, nats.ErrMaxPayload):
		return schema.CodeRequestTooLarge
	case errors.Is(err, schema.ErrHistoryTooLarge):
		return schema.CodeHistoryTooLarge
	case errors.Is(err, schema.ErrFieldTooLong), errors.Is(err, schema.ErrCorruptHistory):
		return schema.CodeRequestTooLarge
	}
	return ""
}

// unrecordable returns the answer code for a session log that can never
// record a call — full (history_too_large: over the limit, or no room even
// for a fence) or corrupt (corrupt_history: a log no reader accepts, or
// one whose epoch is at the limit, which no writer can fence above) — or
// "" for a failure that may pass.
func unrecordable(err error) schema.Code {
	switch {
	case errors.Is(err, stream.ErrLogClosed), errors.Is(err, schema.ErrHistoryTooLarge):
		return schema.CodeHistoryTooLarge
	case errors.Is(err, schema.ErrCorruptHistory), errors.Is(err, stream.ErrEpochExhausted):
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
