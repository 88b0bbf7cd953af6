package toolworker

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/service"
)

// DefaultCallTimeout bounds how long jw.api.call waits for the result of
// the request it published (GatewayConfig.CallTimeout).
const DefaultCallTimeout = 30 * time.Second

// Defaults of GatewayConfig's limits on calls in flight.
const (
	DefaultMaxCallsPerSession = 64
	DefaultMaxCallsPerCaller  = 1024
)

// GatewayConfig configures a Gateway. Topology is required.
type GatewayConfig struct {
	// Topology is jingwei's streams and buckets. Required. Its
	// connection carries the gateway's micro service (Serve).
	Topology *stream.Topology
	// CallTimeout bounds how long Call waits for the tool.result of the
	// request it published. Defaults to DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxCallsPerSession is the most calls of one session the gateway
	// waits for at once; one more is answered busy (schema.CodeBusy) at
	// once, nothing published. Defaults to DefaultMaxCallsPerSession.
	MaxCallsPerSession int
	// MaxCallsPerCaller is the most calls of one caller (Caller) the
	// gateway waits for at once, over all sessions; one more is answered
	// busy. Defaults to DefaultMaxCallsPerCaller.
	MaxCallsPerCaller int
	// Caller names who makes a call, from the context Call gets (the
	// micro request's, in Serve): the key of MaxCallsPerCaller. Defaults
	// to service.Caller: the tenant a tenant-scoped agent's request came
	// through (the server names it, docs/protocol.md §4.1), and "" for
	// every other credential (operators and the fleet-wide agent share
	// one limit).
	Caller func(ctx context.Context) string
	// Owner names the process in the service's metadata. Optional.
	Owner string
	// Logger receives the gateway's log. Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// Gateway is jw.api.call, served where calls are made (the NATS form of
// worker.Gateway, for agents outside the process): it hands a tool
// request to the work queue (jw.requests.<session>) and answers with the
// call's tool.result as the session log holds it, or with the code a tool
// worker recorded for a request that could not become a call. A Worker
// runs one (Config.DisableGateway turns it off); it is also usable on its
// own. Safe for concurrent use; Close ends it.
type Gateway struct {
	t        *stream.Topology
	timeout  time.Duration
	owner    string
	log      zerolog.Logger
	caller   func(context.Context) string
	inflight *inflight

	// inbox is where tool workers tell the gateway where its calls are
	// (HeaderGatewayReply); one subscription, made by the first Call.
	inbox   string
	subOnce sync.Once
	sub     *nats.Subscription
	subErr  error
	wmu     sync.Mutex
	waiters map[waitKey]map[*waiter]struct{}

	imu     sync.Mutex
	indexes map[string]*sessionIndex
}

// NewGateway returns a gateway for cfg.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.Topology == nil {
		return nil, fmt.Errorf("%w: Topology is required", ErrInvalidConfig)
	}
	cfg.CallTimeout = cmp.Or(max(cfg.CallTimeout, 0), DefaultCallTimeout)
	cfg.MaxCallsPerSession = cmp.Or(max(cfg.MaxCallsPerSession, 0), DefaultMaxCallsPerSession)
	cfg.MaxCallsPerCaller = cmp.Or(max(cfg.MaxCallsPerCaller, 0), DefaultMaxCallsPerCaller)
	if cfg.Caller == nil {
		cfg.Caller = service.Caller
	}
	return &Gateway{t: cfg.Topology, timeout: cfg.CallTimeout, owner: cfg.Owner, log: cfg.Logger, caller: cfg.Caller,
		inflight: newInflight(cfg.MaxCallsPerSession, cfg.MaxCallsPerCaller),
		inbox:    cfg.Topology.Prefix + ".gateway." + nuid.Next(),
		waiters:  map[waitKey]map[*waiter]struct{}{}, indexes: map[string]*sessionIndex{}}, nil
}

// Serve registers the gateway's micro service (service.GatewayName, one
// endpoint: service.EndpointCall) on the topology's connection, which
// must carry no other micro service; stop it with the returned service's
// Stop. The request body is read strictly, as a tool worker reads it. A
// tenant-scoped agent's request (service.Caller) for a session of another
// tenant, or of none, is refused with forbidden before anything is
// published or read.
func (g *Gateway) Serve(ctx context.Context) (micro.Service, error) {
	return service.Start(ctx, service.Config{
		Conn:        g.t.JS.Conn(),
		Name:        service.GatewayName,
		Prefix:      g.t.Prefix,
		Description: "jingwei tool worker gateway: run a tool call and wait for its result",
		Metadata:    map[string]string{"owner": g.owner},
		Workers:     gatewayWorkers,
		AnswerWait:  gatewayAnswerWait,
		Role:        string(access.RoleWorker),
		// Only the gateway's own operations: tool bodies share the
		// connection, and a body's refused operation is not a refusal of
		// the calls being answered.
		PermissionSubjects: g.permissionSubjects(),
		Logger:             g.log,
	}, service.Endpoint{Name: service.EndpointCall, Handler: func(ctx context.Context, data []byte) (any, error) {
		q, err := schema.DecodeRequest(data)
		if err != nil {
			return nil, schema.Errorf(schema.CodeInvalidRequest, "%v", err)
		}
		if err := service.CheckSession(ctx, q.Session); err != nil {
			return nil, err
		}
		return g.Call(ctx, q)
	}})
}

// Close ends the gateway's subscription for the tool workers' words;
// calls still waiting then find their answers in the log only.
func (g *Gateway) Close() {
	g.subOnce.Do(func() { g.subErr = errGatewayClosed })
	if g.sub != nil {
		_ = g.sub.Unsubscribe()
	}
}

// gatewayWorkers is how many micro endpoints take a gateway's calls; it
// waits for up to 16 times as many at once (service.Config.MaxInFlight).
const gatewayWorkers = 64

// gatewayAnswerWait is how long an endpoint waits for its call's answer
// before it takes its next request (service.Config.AnswerWait) and the
// call answers on its own. The server hands requests to the endpoints at
// random, busy or not: with the service's 25 ms, 16 callers at once made
// a call wait up to 25 ms behind another on the same endpoint (a p50 of
// 25 ms), though most calls take a millisecond or two.
const gatewayAnswerWait = time.Millisecond

// Call publishes the tool request q on jw.requests.<session> (Nats-Msg-Id
// stream.RequestMsgIDOf: bound to its content, header HeaderGatewayReply) and waits, up to
// GatewayConfig.CallTimeout, for the tool.result of the tool.call that
// carries its request id on the session log, which it returns.
//
// The tool worker that records the call tells the gateway the call's
// stream sequence; the gateway reads the log from there (the stream
// leader's tail, the events from the call on) and answers with what the
// log holds only: the word itself, a message JetStream refused to store,
// or any stray message on jw.events.<session> is never handed to the
// caller. When no word comes (a worker that crashed, a request already
// answered before: a request id already in the log is answered from the
// log without running again), the session's index (sessionIndex), shared
// by all its calls and read from where it stopped, finds the call, first
// after fallbackFirst, then at growing intervals up to fallbackMax.
//
// A tool.call that carries q's request id with another tool, task or
// arguments is not q's: answered request_conflict, never with its result.
// A request a tool worker refused for good is answered with the code
// recorded on jw.answers.<session> (unknown_tool, invalid_request,
// request_too_large, history_too_large). Errors: invalid_request for a
// request that fails schema.Request.Validate, request_too_large for one
// that fails Fits (a tool worker would refuse either; nothing is
// published), busy (GatewayConfig.MaxCallsPerSession or
// MaxCallsPerCaller calls already waiting; nothing published),
// result_pending (the request may still run, or no tool worker took it).
func (g *Gateway) Call(ctx context.Context, q schema.Request) (schema.Event, error) {
	if err := q.Validate(); err != nil {
		return schema.Event{}, schema.Errorf(schema.CodeInvalidRequest, "%v", err)
	}
	if !json.Valid(q.Arguments) {
		return schema.Event{}, schema.Errorf(schema.CodeInvalidRequest, "arguments are not JSON")
	}
	if err := q.Fits(int(g.t.JS.Conn().MaxPayload())); err != nil {
		return schema.Event{}, err
	}
	release, err := g.inflight.acquire(q.Session, g.caller(ctx))
	if err != nil {
		return schema.Event{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	data, err := json.Marshal(q)
	if err != nil {
		return schema.Event{}, err
	}
	msg := nats.NewMsg(g.t.Names().RequestsSubject(q.Session))
	msg.Data = data
	tracing.Inject(ctx, msg.Header) // the request's trace goes on to the tool worker
	wt := &waiter{words: make(chan gatewayWord, 4)}
	if g.listen() == nil {
		msg.Header.Set(HeaderGatewayReply, g.inbox)
		key := waitKey{q.Session, q.RequestID}
		g.addWaiter(key, wt)
		defer g.removeWaiter(key, wt)
	}
	// The digest once (canonical JSON and a SHA-256 of the arguments):
	// the Msg-Id's last part (stream.RequestMsgIDOf) and the answer's.
	digest := stream.RequestDigestHex(q)
	ack, err := g.t.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(stream.RequestMsgID(q.Session, q.RequestID)+"."+digest))
	if err != nil {
		return schema.Event{}, fmt.Errorf("toolworker: publish request %s: %w", q.RequestID, err)
	}
	c := &pendingCall{g: g, q: q, digest: digest}
	defer c.done()
	return c.wait(ctx, wt, ack.Duplicate)
}

// Fallback reads of a call whose tool worker's word has not come: the
// first after fallbackFirst (at once for a request the work queue had
// seen before), then at doubling intervals up to fallbackMax.
const (
	fallbackFirst = 50 * time.Millisecond
	fallbackMax   = time.Second
)

// waitKey names the calls that wait for one request id of one session.
type waitKey struct{ session, requestID string }

// waiter is one Call waiting for the words of its request.
type waiter struct{ words chan gatewayWord }

// listen subscribes to the gateway's inbox once; nil when it is
// subscribed.
func (g *Gateway) listen() error {
	g.subOnce.Do(func() {
		g.sub, g.subErr = g.t.JS.Conn().Subscribe(g.inbox, func(m *nats.Msg) {
			var w gatewayWord
			if json.Unmarshal(m.Data, &w) != nil {
				return
			}
			g.wmu.Lock()
			defer g.wmu.Unlock()
			for wt := range g.waiters[waitKey{w.Session, w.RequestID}] {
				select {
				case wt.words <- w:
				default: // a full waiter has words enough to look
				}
			}
		})
		if g.subErr != nil {
			g.log.Warn().Err(g.subErr).Str("subject", g.inbox).Msg("gateway inbox: calls will find their answers through the log index only")
		}
	})
	return g.subErr
}

func (g *Gateway) addWaiter(k waitKey, wt *waiter) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	m := g.waiters[k]
	if m == nil {
		m = map[*waiter]struct{}{}
		g.waiters[k] = m
	}
	m[wt] = struct{}{}
}

func (g *Gateway) removeWaiter(k waitKey, wt *waiter) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	delete(g.waiters[k], wt)
	if len(g.waiters[k]) == 0 {
		delete(g.waiters, k)
	}
}

// pendingCall is what one Call knows of its request on the log.
type pendingCall struct {
	g       *Gateway
	q       schema.Request
	digest  string // stream.RequestDigestHex(q): its answer's request_digest
	callID  string // its tool.call's, once confirmed
	callSeq uint64
	idx     *sessionIndex // the session's index, once needed
}

func (c *pendingCall) done() {
	if c.idx != nil {
		c.g.releaseIndex(c.idx)
	}
}

// wait waits for the words of the tool worker and looks in the log after
// each, and on its own (the index) when none comes.
func (c *pendingCall) wait(ctx context.Context, wt *waiter, seen bool) (schema.Event, error) {
	delay := fallbackFirst
	if seen {
		delay = 0
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		var (
			ev  schema.Event
			ok  bool
			err error
		)
		select {
		case w := <-wt.words:
			ev, ok, err = c.onWord(ctx, w)
		case <-timer.C:
			ev, ok, err = c.look(ctx, false)
			delay = min(max(2*delay, fallbackFirst), fallbackMax)
			timer.Reset(delay)
		case <-ctx.Done():
			// A last look at the log after the deadline.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			ev, ok, err = c.look(lctx, true)
			cancel()
			var f final
			if errors.As(err, &f) {
				err = f.error
			}
			if !ok && err == nil {
				err = c.pendingError(lctx)
			}
			return ev, err
		}
		if err != nil {
			var f final
			if errors.As(err, &f) {
				return schema.Event{}, f.error
			}
			c.g.log.Warn().Err(err).Str("session", c.q.Session).Str("request_id", c.q.RequestID).Msg("call: read log")
			continue
		}
		if ok {
			return ev, nil
		}
	}
}

// onWord looks where a tool worker's word says: its call and the events
// just after it, with one batched direct get, for the call's result (or,
// no call in the word, the index). A replica that lags answers short: the
// index finds the rest.
func (c *pendingCall) onWord(ctx context.Context, w gatewayWord) (schema.Event, bool, error) {
	if w.CallSeq == 0 {
		// Refused, or found in the log already: the index, read now.
		return c.look(ctx, true)
	}
	if c.callID != "" && w.CallSeq != c.callSeq {
		return c.look(ctx, true)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	events, subject := c.g.t.Events.CachedInfo().Config.Name, c.g.t.Names().EventsSubject(c.q.Session)
	msgs, err := c.g.t.Reader().DirectBatch(rctx, events, subject, w.CallSeq, wordReadAhead)
	if err != nil {
		return schema.Event{}, false, err
	}
	if len(msgs) == 0 || msgs[0].Sequence != w.CallSeq {
		return c.look(ctx, false) // not what the word says: the log decides
	}
	ev, err := decodeStored(c.q.Session, msgs[0])
	if err != nil {
		return schema.Event{}, false, err
	}
	if mine, err := c.isMine(ev); err != nil || !mine {
		if err != nil {
			return schema.Event{}, false, err
		}
		return c.look(ctx, false)
	}
	for _, m := range msgs[1:] {
		var e indexed
		if json.Unmarshal(m.Data, &e) != nil || e.Type != schema.TypeResult || e.Result == nil || e.Result.CallID != c.callID {
			continue
		}
		ev, err := decodeStored(c.q.Session, m)
		return ev, err == nil, err
	}
	return schema.Event{}, false, nil // recorded, not finished: the index follows it
}

// wordReadAhead is how many events after its call a word makes the
// gateway read for the call's result (the session's other calls may come
// in between); beyond them the index finds it.
const wordReadAhead = 8

// isMine checks that ev is the tool.call of c's request id: false when it
// is not one (another event, another request id), request_conflict when it
// carries the request id with other content. It remembers the call.
func (c *pendingCall) isMine(ev schema.Event) (bool, error) {
	if ev.Type != schema.TypeCall || ev.Call == nil || ev.Call.RequestID != c.q.RequestID {
		return false, nil
	}
	if why := conflict(c.q, c.digest, ev.Call); why != "" {
		return false, final{&schema.Error{Code: schema.CodeRequestConflict, CallID: ev.Call.CallID,
			Message: fmt.Sprintf("request id %q of session %s is bound to call %s (seq %d) of another request: %s", c.q.RequestID, c.q.Session, ev.Call.CallID, ev.Seq, why)}}
	}
	c.callID, c.callSeq = ev.Call.CallID, ev.Seq
	return true, nil
}

// conflict says how call differs from the request q whose request id it
// carries ("" when it does not). The test is the tool worker's own
// binding (stream.CallDigest against q's digest, the hex in digest:
// arguments compared as canonical JSON, so numbers beyond float64 stay
// apart); the tool and task are named when they are what differs.
func conflict(q schema.Request, digest string, call *schema.Call) string {
	if d, ok := stream.CallDigest(call); ok && hex.EncodeToString(d[:16]) == digest {
		return ""
	}
	switch {
	case call.Tool != q.Tool:
		return fmt.Sprintf("tool %q, not %q", call.Tool, q.Tool)
	case call.Operation != nil && call.Operation.Task != q.Task:
		return fmt.Sprintf("task %q, not %q", call.Operation.Task, q.Task)
	}
	return "other arguments"
}

// look asks the session's index (refreshed, shared with the session's
// other calls) for the call, its result and an answer. With wait false it
// does not wait for a refresh another call runs (it looks at what the
// index holds).
func (c *pendingCall) look(ctx context.Context, wait bool) (schema.Event, bool, error) {
	if c.idx == nil {
		c.idx = c.g.index(c.q.Session)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.idx.refresh(rctx, c.g, time.Now(), wait); err != nil {
		return schema.Event{}, false, err
	}
	callSeq, resultSeq, a, answered := c.idx.lookup(c.q.RequestID, c.digest, c.callID)
	if c.callID == "" && callSeq > 0 {
		ev, ok, err := c.g.eventAt(rctx, c.q.Session, callSeq)
		if err != nil || !ok {
			return schema.Event{}, false, err
		}
		if mine, err := c.isMine(ev); err != nil || !mine {
			return schema.Event{}, false, err
		}
		resultSeq = c.idx.resultOf(c.callID)
	}
	if c.callID == "" {
		if answered {
			return schema.Event{}, false, final{schema.Errorf(a.Code, "request %q refused by a tool worker (recorded on %s): %s", c.q.RequestID, c.g.t.Names().AnswersSubject(c.q.Session), a.Message)}
		}
		return schema.Event{}, false, nil
	}
	if resultSeq == 0 {
		return schema.Event{}, false, nil
	}
	ev, ok, err := c.g.eventAt(rctx, c.q.Session, resultSeq)
	if err != nil || !ok || ev.Type != schema.TypeResult || ev.Result == nil || ev.Result.CallID != c.callID {
		return schema.Event{}, false, err
	}
	return ev, true, nil
}

// final is an answer of the log that ends the call (a conflict, a
// refusal), as opposed to a read that failed and is made again.
type final struct{ error }

func (f final) Unwrap() error { return f.error }

// errGatewayClosed is the inbox's error once Close was called.
var errGatewayClosed = errors.New("toolworker: gateway closed")

// pendingError is the answer of a call without a result in the gateway's
// time: approval_pending when its tool.call waits for approval (the log
// says so: a call waiting for a person is not a slow or busy service),
// result_pending otherwise.
func (c *pendingCall) pendingError(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if h, err := c.g.t.Logs().Load(ctx, c.q.Session); err == nil {
		callID := c.callID
		for i := range h {
			if callID == "" && h[i].Call != nil && h[i].Call.RequestID == c.q.RequestID {
				callID = h[i].Call.CallID
			}
		}
		if callID != "" {
			for _, p := range recovery.ApprovalsOf(h).Pending {
				if p.CallID == callID {
					return &schema.Error{Code: schema.CodeApprovalPending, CallID: callID,
						Message: fmt.Sprintf("call %s of request %q waits for approval until %s (jingwei approve/deny; ask again with the same request id for its result)", callID, c.q.RequestID, p.Deadline.Format(time.RFC3339))}
				}
			}
		}
	}
	return schema.Errorf(schema.CodeResultPending, "no tool.result for request %q within %s (it may still run)", c.q.RequestID, c.g.timeout)
}

// permissionSubjects are the subjects of the gateway's own operations for
// a jw.api.call (service.Config.PermissionSubjects): the request publish
// and the reads of the session logs.
func (g *Gateway) permissionSubjects() []string {
	events := g.t.Events.CachedInfo().Config.Name
	return []string{
		g.t.Names().RequestsSubject(""), // jw.requests.: every session's
		"$JS.API.DIRECT.GET." + events,
		"$JS.API.STREAM.MSG.GET." + events,
	}
}
