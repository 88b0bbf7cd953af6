package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
)

// ServiceName is the micro service's name (`nats micro ls` shows it).
const ServiceName = "jingwei"

// ServiceVersion is the micro service's version.
const ServiceVersion = "0.1.0"

// Endpoint names; each is served on <prefix>.api.<name> (jw.api.call, …).
const (
	EndpointCall    = "call"
	EndpointInspect = "inspect"
	EndpointPrepare = "prepare"
	EndpointStatus  = "status"
)

// Target is the request body of jw.api.inspect and jw.api.prepare.
type Target struct {
	Session string `json:"session"`
	CallID  string `json:"call_id"`
}

// StatusRequest is the request body of jw.api.status; an empty body asks
// about every session.
type StatusRequest struct {
	Session string `json:"session,omitempty"`
	// CallID, with Session, asks for the call's reviews too (Status.Reviews):
	// how this recoverer judges each review on jw.reviews.<session> for it.
	CallID string `json:"call_id,omitempty"`
}

// ErrorBody is the body of an error answer, {"error":{"code","message"}};
// the micro error headers carry the same code and message.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error of an ErrorBody. Latest names the latest call of
// the chain for superseded_call.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Latest  string `json:"latest,omitempty"`
}

// maxConcurrentRequests bounds the service requests handled at once (a
// call waits up to CallTimeout).
const maxConcurrentRequests = 256

// serve registers the micro service. Handlers run on their own goroutines
// (at most maxConcurrentRequests), so a slow call does not hold the others.
func (r *Recoverer) serve(ctx context.Context) (micro.Service, error) {
	nc := r.t.JS.Conn()
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "jingwei: record AI-agent tool calls and recover them safely",
		Metadata:    map[string]string{"recoverer": r.cfg.Name},
	})
	if err != nil {
		return nil, fmt.Errorf("recoverer: micro service: %w", err)
	}
	sem := make(chan struct{}, maxConcurrentRequests)
	add := func(name string, h func(ctx context.Context, data []byte) (any, error)) error {
		return svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			// The answer is sent from another goroutine, after this
			// handler returned: it must not go through req, whose state
			// micro reads (for its stats) once the handler returns.
			data, subject, reply := req.Data(), req.Subject(), req.Reply()
			go func() {
				defer func() { <-sem }()
				v, err := h(ctx, data)
				r.respond(nc, subject, reply, v, err)
			}()
		}), micro.WithEndpointSubject(r.t.APISubject(name)))
	}
	for _, e := range []struct {
		name string
		h    func(ctx context.Context, data []byte) (any, error)
	}{
		{EndpointInspect, func(ctx context.Context, data []byte) (any, error) {
			var t Target
			if err := decodeBody(data, &t); err != nil {
				return nil, err
			}
			return r.Inspect(ctx, t.Session, t.CallID)
		}},
		{EndpointPrepare, func(ctx context.Context, data []byte) (any, error) {
			var t Target
			if err := decodeBody(data, &t); err != nil {
				return nil, err
			}
			return r.Prepare(ctx, t.Session, t.CallID)
		}},
		{EndpointStatus, func(ctx context.Context, data []byte) (any, error) {
			var s StatusRequest
			if len(strings.TrimSpace(string(data))) > 0 {
				if err := decodeBody(data, &s); err != nil {
					return nil, err
				}
			}
			st, err := r.Status(ctx, s.Session)
			if err != nil || s.CallID == "" {
				return st, err
			}
			if err := checkTarget(s.Session, s.CallID); err != nil {
				return nil, err
			}
			st.Reviews, err = r.Reviews(ctx, s.Session, s.CallID)
			return st, err
		}},
		{EndpointCall, func(ctx context.Context, data []byte) (any, error) {
			// Strictly, as a tool worker will read it.
			q, err := schema.DecodeRequest(data)
			if err != nil {
				return nil, schema.Errorf(schema.CodeInvalidRequest, "%v", err)
			}
			return r.Call(ctx, q)
		}},
	} {
		if err := add(e.name, e.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("recoverer: endpoint %s: %w", e.name, err)
		}
	}
	return svc, nil
}

func decodeBody(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return schema.Errorf(schema.CodeBadRequest, "request body: %v", err)
	}
	return nil
}

// respond answers a request on reply with v as JSON, or with an error in
// micro's form: the Nats-Service-Error and Nats-Service-Error-Code headers
// and the {"error":{…}} body.
func (r *Recoverer) respond(nc *nats.Conn, subject, reply string, v any, err error) {
	msg := &nats.Msg{Subject: reply}
	if err == nil {
		b, merr := json.Marshal(v)
		if merr != nil {
			err = fmt.Errorf("recoverer: encode answer: %w", merr)
		} else {
			msg.Data = b
		}
	}
	if err != nil {
		d := ErrorDetail{Code: string(schema.CodeInternal), Message: err.Error()}
		var se *schema.Error
		if errors.As(err, &se) {
			d.Code, d.Latest = string(se.Code), se.Latest
			// The code travels in its own field: don't repeat it in the text.
			d.Message = strings.Replace(d.Message, string(se.Code)+": ", "", 1)
		} else {
			r.log.Error().Err(err).Str("subject", subject).Msg("service request failed")
		}
		msg.Data, _ = json.Marshal(ErrorBody{Error: d})
		// The description travels in a header: one line.
		msg.Header = nats.Header{
			micro.ErrorHeader:     []string{strings.NewReplacer("\r", " ", "\n", " ").Replace(d.Message)},
			micro.ErrorCodeHeader: []string{d.Code},
		}
	}
	if reply == "" {
		return // a publish without a reply subject asks for no answer
	}
	if perr := nc.PublishMsg(msg); perr != nil {
		r.log.Warn().Err(perr).Str("subject", subject).Msg("service answer not sent")
	}
}

// Call publishes the tool request q on jw.requests.<session> (Nats-Msg-Id =
// request_id) and waits, up to Config.CallTimeout, for the tool.result of
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
// tool worker would refuse either; nothing is published), timeout (the
// request may still run, or no tool worker took it).
func (r *Recoverer) Call(ctx context.Context, q schema.Request) (schema.Event, error) {
	if err := q.Validate(); err != nil {
		return schema.Event{}, schema.Errorf(schema.CodeInvalidRequest, "%v", err)
	}
	if !json.Valid(q.Arguments) {
		return schema.Event{}, schema.Errorf(schema.CodeInvalidRequest, "arguments are not JSON")
	}
	if err := q.Fits(int(r.t.JS.Conn().MaxPayload())); err != nil {
		return schema.Event{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	data, err := json.Marshal(q)
	if err != nil {
		return schema.Event{}, err
	}
	if _, err := r.t.JS.Publish(ctx, r.t.RequestsSubject(q.Session), data, jetstream.WithMsgID(q.RequestID)); err != nil {
		return schema.Event{}, fmt.Errorf("recoverer: publish request %s: %w", q.RequestID, err)
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
		evs, err := r.t.LoadFrom(lctx, q.Session, f.next)
		lcancel()
		if err != nil {
			r.log.Warn().Err(err).Str("session", q.Session).Msg("call: read log")
		} else if res, ok := f.scan(evs); ok {
			return res, nil
		}
		if f.callID == "" {
			// Not a call (yet): a worker may have refused it for good.
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			a, ok, err := r.t.FindAnswer(actx, q.Session, q.RequestID)
			acancel()
			if err == nil && ok {
				return schema.Event{}, schema.Errorf(a.Code, "request %q refused by a tool worker (recorded on %s): %s", q.RequestID, r.t.AnswersSubject(q.Session), a.Message)
			}
		}
		if ctx.Err() != nil {
			return schema.Event{}, schema.Errorf(schema.CodeResultPending, "no tool.result for request %q within %s (it may still run)", q.RequestID, r.cfg.CallTimeout)
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
