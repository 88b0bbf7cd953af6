package recoverer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// openCall is what the classifier keeps of a call until its result arrives.
type openCall struct {
	id       string
	tool     string
	task     string
	key      string
	contract effect.Contract
	epoch    uint64
	seq      uint64
	at       time.Time // the tool.call's at: how long the call has been open
	marker   bool
	started  bool
	combined bool // started by its tool.call (call.started), not a tool.started
	retry    bool // a retry: its assessment needs the chain, so it is loaded
	legacy   bool // no operation: no assessment (legacy_call)
}

// assess builds the assessment of a first attempt from its state.
func (c *openCall) assess(session string, status schema.Status, stage schema.Stage) schema.Assessment {
	out, ev, dec := recovery.Classify(status, stage, c.marker, c.started, c.contract)
	return schema.Assessment{
		Session: session, CallID: c.id, Tool: c.tool, Task: c.task, Key: c.key,
		Contract: c.contract, Outcome: out, Evidence: ev, Decision: dec,
		Attempts: 1, Chain: []string{c.id},
	}
}

// classifier is the recoverer's event consumer: it reads every session
// event (jw.events.>) with a durable consumer, keeps the open calls
// (tracker) and publishes an assessment for every call that finishes.
type classifier struct {
	*base
	pub   *publisher
	track *tracker
	// seeded says the tracker holds the open calls of every event below
	// the consumer's ack floor (seed); only the run goroutine uses it.
	seeded bool
	// delivered is the consumer sequence of the consumer's last delivery
	// when start returned (after its reset): the first delivery of the run
	// must follow it. Only the run goroutine uses it.
	delivered uint64
	// load reads a session's history through at least a sequence
	// (Logs.LoadThrough); tests replace it with a lagging replica.
	load func(ctx context.Context, session string, atLeast uint64) ([]schema.Event, error)
}

// ackBatch is how many events are classified before their assessments are
// flushed and the events acknowledged (also whenever the consumer has
// nothing pending, so a quiet system publishes at once). It is also the
// window over which a session's assessments of results are grouped into
// one batch message: with 64 sessions writing interleaved, 4,096 events
// make batches of about 21 assessments (a message per ~64 events instead
// of one per finished call); at 256 (before batches) about 1.3, at 1,024
// about 5, which measured a sixth more CPU per event (BenchmarkClassifyAlone).
// Memory: the grouped assessments of one window (~1,400 of ~300 bytes)
// plus the pulled events.
const ackBatch = 4096

// pullBatch is how many events one pull asks for.
const pullBatch = 1024

// maxAckPending is how many events the classifier may hold
// unacknowledged: two batches in the pipeline (one settling while the
// next is classified) plus a pull's worth.
const maxAckPending = 2*ackBatch + pullBatch

// eventsConsumerConfig is the classifier's durable consumer: every event of
// the stream (JW_EVENTS holds nothing else, so no filter: a filter makes
// the server match every stored subject against it, about a sixth of the
// server's CPU when a consumer drains the stream), acknowledged
// cumulatively (AckAll) once per batch.
func eventsConsumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckAllPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: maxAckPending,
	}
}

// start creates (or finds) the durable consumer and seeds the tracker the
// first time it runs. Recoverer.run calls it before it serves status, so
// that status never answers from a tracker that is not whole yet.
func (c *classifier) start(ctx context.Context) (jetstream.Consumer, error) {
	cfg := eventsConsumerConfig(c.consumerName("events"))
	cfg.Description = "jingwei recovery worker " + c.cfg.Name + ": classifies every call"
	cons, err := c.t.JS.CreateOrUpdateConsumer(ctx, c.t.Names().StreamName("EVENTS"), cfg)
	if err != nil {
		return nil, fmt.Errorf("events consumer: %w", err)
	}
	// Events delivered to an earlier run (or process) and not acknowledged
	// come again at once, not after AckWait.
	// The first delivery of the run follows the consumer's last one (see
	// classifyRun).
	info := cons.CachedInfo()
	c.delivered = info.Delivered.Consumer
	if info.NumAckPending > 0 {
		rs, err := c.t.JS.ResetConsumer(ctx, info.Stream, info.Name)
		switch {
		case err != nil:
			c.log.Warn().Err(err).Int("ack_pending", info.NumAckPending).Msg("events consumer not reset to its ack floor; unacknowledged events come back after AckWait")
		case rs != nil && rs.ConsumerInfo != nil:
			c.delivered = rs.ConsumerInfo.Delivered.Consumer
		default:
			c.delivered = 0 // numbered from 1 again
		}
	}
	if err := c.seed(ctx, cons); err != nil {
		return nil, err
	}
	return cons, nil
}

// seed makes the tracker whole before the consumer delivers anything, the
// first time run runs in this process. A durable consumer resumes after
// its ack floor: every event up to it was classified and its assessments
// published by an earlier process, but the calls that were still open then
// live only in that process's memory. Without them a call opened before a
// restart and closed by a session.fenced after it would never be assessed
// (the fence closes only tracked calls), and status would not list it as
// open. So the events of every session up to the ack floor are read from
// JW_EVENTS and observed again, their findings dropped (they were
// published). Events delivered to the earlier process and not yet
// acknowledged are redelivered at once (a consumer reset to its ack floor)
// instead of after AckWait.
func (c *classifier) seed(ctx context.Context, cons jetstream.Consumer) error {
	if c.seeded {
		return nil
	}
	info := cons.CachedInfo()
	floor := info.AckFloor.Stream
	if floor == 0 {
		c.seeded = true
		return nil
	}
	sessions, err := sessionsOf(ctx, c.t, info.Stream, c.t.Names().EventsSubject(""))
	if err != nil {
		return fmt.Errorf("events consumer: seed: list sessions: %w", err)
	}
	errDone := errors.New("past the ack floor")
	var found []finding
	events := 0
	for _, s := range sessions {
		err := c.t.Reader().ReadSubject(ctx, info.Stream, c.t.Names().EventsSubject(s), func(m *jetstream.RawStreamMsg) error {
			if m.Sequence > floor {
				return errDone
			}
			events++
			found, _ = c.track.observe(s, m.Sequence, m.Data, found[:0])
			return nil
		})
		if err != nil && !errors.Is(err, errDone) {
			return fmt.Errorf("events consumer: seed %s: %w", s, err)
		}
	}
	_, open := c.track.counts()
	c.log.Info().Uint64("ack_floor", floor).Int("sessions", len(sessions)).Int("events", events).Int("open_calls", open).Msg("open calls rebuilt from JW_EVENTS up to the consumer's ack floor")
	c.seeded = true
	return nil
}

// inspectLoaded loads the session through at least seq (the event that
// needs the history: its read must reach it) and inspects callID. It
// returns nil and no error if the call cannot be assessed (superseded by a
// later attempt, legacy, corrupt history), which is logged. A history that
// comes back short of seq — a replica or a deposed leader behind the
// consumer, whose answer would make a finished call look open — is never
// classified: the read is retried with backoff for up to shortReadFor, and
// then the error is returned.
func (c *classifier) inspectLoaded(ctx context.Context, session, callID string, seq uint64) (*schema.Assessment, error) {
	h, err := c.loadThrough(ctx, session, callID, seq)
	var se *schema.Error
	if err != nil && !errors.As(err, &se) {
		return nil, err
	}
	if err == nil {
		var a schema.Assessment
		if a, err = inspect(h, callID); err == nil {
			return &a, nil
		}
	}
	lvl := c.log.Warn()
	if errors.Is(err, schema.ErrSupersededCall) || errors.Is(err, schema.ErrLegacyCall) {
		lvl = c.log.Debug()
	}
	lvl.Err(err).Str("session", session).Str("call_id", callID).Msg("call not assessed")
	return nil, nil
}

// loadThrough loads the session through at least seq, retrying a read
// that comes back short of it (a replica or a deposed leader behind the
// consumer) with backoff for up to shortReadFor; then the short read is an
// error wrapping errShortHistory (the event is not acknowledged and comes
// again). A refusal for good (a *schema.Error: corrupt, too large) is
// returned at once. callID only names the call in the log lines.
func (c *classifier) loadThrough(ctx context.Context, session, callID string, seq uint64) ([]schema.Event, error) {
	load := c.load
	if load == nil {
		load = c.t.Logs().LoadThrough
	}
	b := newBackoff(10*time.Millisecond, 500*time.Millisecond, shortReadFor)
	for {
		h, err := load(ctx, session, seq)
		if err == nil && (len(h) == 0 || h[len(h)-1].Seq < seq) {
			err = fmt.Errorf("%w: history of %s read through seq %d, want at least %d", errShortHistory, session, lastSeq(h), seq)
		}
		var se *schema.Error
		if err == nil || errors.As(err, &se) {
			return h, err // complete, or refused for good (corrupt, too large)
		}
		d := b.NextBackOff()
		if d == backoff.Stop || ctx.Err() != nil {
			c.log.Error().Err(err).Str("session", session).Str("call_id", callID).Msg("history short of the event that needs it; not classified, the event comes again")
			return nil, fmt.Errorf("events consumer: %w", err)
		}
		c.log.Warn().Err(err).Str("session", session).Str("call_id", callID).Dur("retry_in", d).Msg("history short of the event that needs it (a lagging replica?); reading again")
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// shortReadFor bounds how long a history read that comes back short of
// the event needing it is retried before the classifier gives up on the
// event (it is delivered again).
const shortReadFor = 15 * time.Second

func lastSeq(h []schema.Event) uint64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Seq
}

func newBackoff(initial, maxInterval, maxElapsed time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = initial, maxInterval, maxElapsed
	b.Reset()
	return b
}

// finding is what the classifier concluded from one event: an assessment
// ready to publish, or a call whose assessment needs its loaded history.
// The assessment is held by value (a pointer was one allocation per
// finished call): the classifier reuses its slice of findings.
type finding struct {
	session string
	callID  string
	a       schema.Assessment
	ready   bool // a holds the assessment; false: load the history and Inspect callID
	// fenced: the call was closed by a session.fenced (its assessment is
	// published with its id as Nats-Msg-Id).
	fenced bool
	// callSeq is the stream sequence of the call's tool.call (0 when the
	// tracker did not see it): its message carries the call's trace context.
	callSeq uint64
}

// tracker is the classifier's state: the open calls per session. Safe for
// concurrent use (the event loop writes, status reads).
type tracker struct {
	mu       sync.Mutex
	sessions map[string]*recovery.OpenCalls[*openCall]
	// corrupt holds the sessions with an event that does not decode: their
	// history is corrupt_history for Inspect (every call of it), so the
	// classifier assesses nothing more of them either. Only observe (the
	// classifier's goroutine) reads and writes it: it is read without mu,
	// written with mu held.
	corrupt map[string]struct{}
	// fences holds the highest session.fenced epoch seen per session: an
	// event below it was written by a fenced writer, which makes the
	// history corrupt for Inspect, so here too.
	fences map[string]uint64
	open   int
	// seen counts the events observed: atomic, because an event of a
	// corrupt session is counted without mu; every other one with mu
	// held, with its effect.
	seen atomic.Uint64
	// spare holds emptied per-session call sets for reuse: a session
	// with one call at a time empties its set with every result.
	spare []*recovery.OpenCalls[*openCall]
	// freeCalls holds closed calls for reuse (one allocation per call
	// otherwise); nothing refers to a call once it is closed.
	freeCalls []*openCall
	// approvals tracks waiting calls and stopped tasks for status
	// (approvals.go).
	approvals *approvalTrack
}

func newTracker() *tracker {
	return &tracker{sessions: make(map[string]*recovery.OpenCalls[*openCall]), corrupt: make(map[string]struct{}), fences: make(map[string]uint64), approvals: newApprovalTrack()}
}

// openSessions returns the sessions with calls tracked as open.
func (t *tracker) openSessions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.sessions))
	for s := range t.sessions {
		out = append(out, s)
	}
	return out
}

// markCorrupt drops the session's open calls and assesses nothing more of
// it. t.mu is held.
func (t *tracker) markCorrupt(session string) {
	if calls := t.sessions[session]; calls != nil {
		t.open -= calls.Len()
	}
	delete(t.sessions, session)
	delete(t.fences, session)
	t.corrupt[session] = struct{}{}
}

// observe classifies one event of session at stream sequence seq and
// appends what it concluded to out. The event is read with
// schema.DecodeEvent, the decoder recovery.Inspect reads histories with,
// so the classifier sees exactly the events `jingwei inspect` sees: a
// payload it refuses (a duplicate member name, a missing field, …) makes
// the history corrupt there, so here it makes the session corrupt: its open
// calls are dropped and nothing more of it is assessed (the error is
// returned, for the log, for the first such event only).
//
// It takes t.mu once per event, after decoding (status reads the tracker
// meanwhile). Only the classifier's goroutine calls it.
func (t *tracker) observe(session string, seq uint64, data []byte, out []finding) ([]finding, error) {
	if _, corrupt := t.corrupt[session]; corrupt { // only this goroutine writes corrupt
		t.seen.Add(1)
		return out, nil
	}
	ev, err := schema.DecodeEvent(data)
	t.mu.Lock()
	defer t.mu.Unlock()
	// Counted with the event's effect, under mu: counts (status) never
	// sees an event counted and not yet applied.
	t.seen.Add(1)
	if err != nil {
		t.markCorrupt(session)
		return out, err
	}
	// The rules Inspect applies across events (see recovery.Inspect): an
	// event of another session, or below an earlier fence, corrupts the
	// history from there on.
	fence, fenced := t.fences[session]
	switch {
	case ev.Session != session:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "event at seq %d belongs to session %q, not %q", seq, ev.Session, session)
	case fenced && ev.Epoch < fence:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "event at seq %d has epoch %d, below the session.fenced epoch %d before it (a fenced writer's)", seq, ev.Epoch, fence)
	case fenced && ev.Type == schema.TypeFenced && ev.Fence.Epoch < fence:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "session.fenced at seq %d has epoch %d, below the earlier fence's %d", seq, ev.Fence.Epoch, fence)
	}
	if err := t.misordered(session, seq, &ev); err != nil {
		t.markCorrupt(session)
		return out, err
	}
	// DecodeEvent guarantees the body of a known type.
	t.approvals.observe(session, seq, &ev)
	switch ev.Type {
	case schema.TypeCall:
		call := ev.Call
		// call.Started: the combined form, a tool.call and its tool.started in one.
		c := t.newCall()
		*c = openCall{id: call.CallID, tool: call.Tool, epoch: ev.Epoch, seq: seq, at: ev.At, marker: call.StartMarker, started: call.Started, combined: call.Started}
		if op := call.Operation; op != nil {
			c.task, c.key, c.contract, c.retry = op.Task, op.Key, op.Contract, op.Retry != nil
		} else {
			c.legacy = true
		}
		calls := t.sessions[session]
		if calls == nil {
			calls = t.newCalls()
			t.sessions[session] = calls
		}
		if _, dup := calls.Get(c.id); !dup {
			t.open++
		}
		calls.Open(c.id, ev.Epoch, c)
	case schema.TypeStarted:
		if calls := t.sessions[session]; calls != nil {
			if c, ok := calls.Get(ev.Started.CallID); ok {
				c.started = true
			}
		}
	case schema.TypeResult:
		id := ev.Result.CallID
		c := t.drop(session, id)
		switch {
		case c == nil || c.retry:
			// Opened before a restart, or a retry: the chain is in the log.
			out = append(out, finding{session: session, callID: id})
		case c.legacy:
		default:
			out = append(out, finding{session: session, callID: c.id, a: c.assess(session, ev.Result.Status, ev.Result.Stage), ready: true, callSeq: c.seq})
		}
		t.freeCall(c)
	case schema.TypeApprovalRequested, schema.TypeApprovalGranted:
		// A call waiting for approval survives fences (recovery.OpenCalls).
		if calls := t.sessions[session]; calls != nil {
			calls.Observe(ev, nil, nil)
		}
	case schema.TypeFenced:
		t.fences[session] = max(fence, ev.Fence.Epoch)
		// Calls of older epochs can never get their result now: their
		// assessment is final. This is the one place an assessment of a
		// call closed by a fence is made, whoever fenced (a recovery
		// worker's takeover, a tool worker's confirm).
		if calls := t.sessions[session]; calls != nil {
			calls.Fence(ev.Fence.Epoch, func(id string, c *openCall) {
				t.closed(session, calls)
				switch {
				case c.retry:
					out = append(out, finding{session: session, callID: id, fenced: true})
				case c.legacy:
				default:
					out = append(out, finding{session: session, callID: id, a: c.assess(session, "", ""), ready: true, fenced: true, callSeq: c.seq})
				}
				t.freeCall(c)
			})
		}
	}
	return out, nil
}

// misordered applies to an event of a call the tracker holds open the
// rules of a call's own order that Inspect applies (recovery.Inspect),
// where a call already started — by a tool.started, or by its tool.call in
// the combined form (call.started) — gets a second start, an approval, or
// a rejection: the history is corrupt there, and Inspect would answer
// corrupt_history for its calls, so the classifier must not assess them
// from its own state. Calls it does not hold (opened before a restart)
// are assessed from the loaded log, by Inspect itself. t.mu is held.
func (t *tracker) misordered(session string, seq uint64, ev *schema.Event) error {
	var id, what string
	switch ev.Type {
	case schema.TypeStarted:
		id, what = ev.Started.CallID, "tool.started"
	case schema.TypeApprovalRequested:
		id, what = ev.ApprovalRequest.CallID, "approval.requested"
	case schema.TypeApprovalGranted:
		id, what = ev.Approval.CallID, "approval.granted"
	case schema.TypeResult:
		if ev.Result.Status != schema.StatusRejected {
			return nil
		}
		id, what = ev.Result.CallID, "a rejection"
	default:
		return nil
	}
	calls := t.sessions[session]
	if calls == nil {
		return nil
	}
	c, ok := calls.Get(id)
	if !ok || !c.started {
		return nil
	}
	how := "after its tool.started"
	if c.combined {
		how = "whose tool.call recorded it started (started: true)"
	}
	return schema.Errorf(schema.CodeCorruptHistory, "event at seq %d: %s for call %q, %s", seq, what, id, how)
}

// drop removes and returns an open call (nil if not tracked). t.mu is held.
func (t *tracker) drop(session, id string) *openCall {
	calls := t.sessions[session]
	if calls == nil {
		return nil
	}
	c, ok := calls.Close(id)
	if !ok {
		return nil
	}
	t.closed(session, calls)
	return c
}

// closed counts one call of session closed. t.mu is held.
func (t *tracker) closed(session string, calls *recovery.OpenCalls[*openCall]) {
	t.open--
	if calls.Len() == 0 {
		delete(t.sessions, session)
		if len(t.spare) < maxSpare {
			t.spare = append(t.spare, calls)
		}
	}
}

// maxSpare bounds the emptied call sets the tracker keeps for reuse.
const maxSpare = 64

// maxFreeCalls bounds the closed calls the tracker keeps for reuse.
const maxFreeCalls = 1024

// newCall returns a call to fill: a closed one, or a new one. t.mu is
// held.
func (t *tracker) newCall() *openCall {
	if n := len(t.freeCalls); n > 0 {
		c := t.freeCalls[n-1]
		t.freeCalls = t.freeCalls[:n-1]
		return c
	}
	return new(openCall)
}

// freeCall keeps a closed call (nil: none) for reuse. t.mu is held.
func (t *tracker) freeCall(c *openCall) {
	if c != nil && len(t.freeCalls) < maxFreeCalls {
		*c = openCall{}
		t.freeCalls = append(t.freeCalls, c)
	}
}

// newCalls returns an empty call set for a session. t.mu is held.
func (t *tracker) newCalls() *recovery.OpenCalls[*openCall] {
	if n := len(t.spare); n > 0 {
		calls := t.spare[n-1]
		t.spare[n-1] = nil
		t.spare = t.spare[:n-1]
		return calls
	}
	return new(recovery.OpenCalls[*openCall])
}

// counts returns the events seen and the calls tracked as open.
func (t *tracker) counts() (seen uint64, open int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen.Load(), t.open
}

// list returns the open calls of session, or of every session when
// session is "".
func (t *tracker) list(session string) []service.OpenCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []service.OpenCall
	for s, calls := range t.sessions {
		if session != "" && s != session {
			continue
		}
		calls.Each(func(_ string, c *openCall) {
			out = append(out, service.OpenCall{Session: s, CallID: c.id, Tool: c.tool, Task: c.task, Key: c.key, Contract: c.contract, Epoch: c.epoch, Seq: c.seq, Started: c.started, At: c.at})
		})
	}
	return out
}
