package toolworker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// DefaultCallTimeout bounds how long jw.api.call waits for the result of
// the request it published (GatewayConfig.CallTimeout).
const DefaultCallTimeout = 30 * time.Second

// GatewayConfig configures a Gateway. Topology is required.
type GatewayConfig struct {
	// Topology is jingwei's streams and buckets. Required. Its
	// connection carries the gateway's micro service (Serve).
	Topology *stream.Topology
	// CallTimeout bounds how long Call waits for the tool.result of the
	// request it published. Defaults to DefaultCallTimeout.
	CallTimeout time.Duration
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
// own. Safe for concurrent use.
type Gateway struct {
	t       *stream.Topology
	timeout time.Duration
	owner   string
	log     zerolog.Logger
}

// NewGateway returns a gateway for cfg.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.Topology == nil {
		return nil, fmt.Errorf("%w: Topology is required", ErrInvalidConfig)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	return &Gateway{t: cfg.Topology, timeout: cfg.CallTimeout, owner: cfg.Owner, log: cfg.Logger}, nil
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
		Logger:      g.log,
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

// gatewayWorkers is how many micro endpoints take a gateway's calls; it
// waits for up to 16 times as many at once (service.Config.MaxInFlight).
const gatewayWorkers = 64

// Call publishes the tool request q on jw.requests.<session> (Nats-Msg-Id
// stream.RequestMsgID) and waits, up to GatewayConfig.CallTimeout, for the tool.result of
// the tool.call that carries its request id on the session log, which it
// returns. The answer is read from the stored log only (Topology.LoadFrom,
// polled), never from a message on the wire: a publish JetStream refused to
// store, or any stray message on jw.events.<session>, is never handed to
// the caller. A request id already in the log (published before) is
// answered from the log without running again. A request a tool worker
// refused for good is answered with the code recorded on
// jw.answers.<session> (unknown_tool, invalid_request, request_too_large,
// history_too_large). Errors: invalid_request for a request that fails
// schema.Request.Validate, request_too_large for one that fails Fits (a
// tool worker would refuse either; nothing is published), result_pending (the
// request may still run, or no tool worker took it).
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
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	data, err := json.Marshal(q)
	if err != nil {
		return schema.Event{}, err
	}
	if _, err := g.t.JS.Publish(ctx, g.t.RequestsSubject(q.Session), data, jetstream.WithMsgID(stream.RequestMsgID(q.Session, q.RequestID))); err != nil {
		return schema.Event{}, fmt.Errorf("toolworker: publish request %s: %w", q.RequestID, err)
	}
	f := resultFinder{requestID: q.RequestID}
	// The log is polled, from where the last read stopped: one message get
	// of its tail while nothing new is there. The wait grows from 5 ms to
	// callPoll.
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 5*time.Millisecond, callPoll, 0
	for {
		// Also after the deadline: a last look at the log.
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		evs, err := g.t.LoadFrom(lctx, q.Session, f.next)
		lcancel()
		if err != nil {
			g.log.Warn().Err(err).Str("session", q.Session).Msg("call: read log")
		} else if res, ok := f.scan(evs); ok {
			return res, nil
		}
		if f.callID == "" {
			// Not a call (yet): a worker may have refused it for good.
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			a, ok, err := g.t.FindAnswer(actx, q.Session, q.RequestID)
			acancel()
			if err == nil && ok {
				return schema.Event{}, schema.Errorf(a.Code, "request %q refused by a tool worker (recorded on %s): %s", q.RequestID, g.t.AnswersSubject(q.Session), a.Message)
			}
		}
		if ctx.Err() != nil {
			return schema.Event{}, schema.Errorf(schema.CodeResultPending, "no tool.result for request %q within %s (it may still run)", q.RequestID, g.timeout)
		}
		if len(evs) > 0 {
			b.Reset()
		}
		select {
		case <-time.After(b.NextBackOff()):
		case <-ctx.Done():
		}
	}
}

// callPoll is the longest Call waits between two reads of the log.
const callPoll = 250 * time.Millisecond

// resultFinder follows a session log for the tool.call of one request id
// and that call's tool.result.
type resultFinder struct {
	requestID string
	callID    string
	next      uint64 // first seq not read yet
}

// scan reads the next events of the log (in order, from f.next) and
// returns the result once both the call and its result have been seen.
func (f *resultFinder) scan(evs []schema.Event) (schema.Event, bool) {
	for _, ev := range evs {
		f.next = ev.Seq + 1
		switch {
		case f.callID == "" && ev.Type == schema.TypeCall && ev.Call != nil && ev.Call.RequestID == f.requestID:
			f.callID = ev.Call.CallID
		case f.callID != "" && ev.Type == schema.TypeResult && ev.Result != nil && ev.Result.CallID == f.callID:
			return ev, true
		}
	}
	return schema.Event{}, false
}
