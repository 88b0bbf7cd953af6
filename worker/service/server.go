package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

// Handler answers one request body: the value to answer with (sent as
// JSON), or an error (sent as the error body and micro's error headers,
// and counted by micro's stats). ctx ends when the service's context
// does, and carries the tenant of a tenant-scoped request (Caller).
type Handler func(ctx context.Context, body []byte) (any, error)

// Endpoint is one endpoint a service serves.
type Endpoint struct {
	// Name is the endpoint name (EndpointCall, …); it is served on
	// <prefix>.api.<Name> with EndpointMetadata(Name), and, when
	// TenantScoped(Name), on <prefix>.api.<Name>.* too, for tenant-scoped
	// agents (the handler's ctx carries the tenant: Caller).
	Name string
	// Handler answers its requests. Required.
	Handler Handler
}

// DefaultWorkers is how many micro endpoints take one endpoint's requests
// (Config.Workers).
const DefaultWorkers = 8

// DefaultAnswerWait is Config.AnswerWait's default.
const DefaultAnswerWait = 25 * time.Millisecond

// Config configures Start. Conn and Name are required.
type Config struct {
	// Conn carries the service. One connection carries one micro service:
	// under jingwei's roles each request may be answered once, and two
	// services on one connection would both answer $SRV.PING.
	Conn *nats.Conn
	// Name is the micro service name (Name or GatewayName).
	Name string
	// Prefix is the topology's subject prefix. Defaults to
	// stream.DefaultPrefix.
	Prefix string
	// Description is the service's description in `nats micro info`.
	Description string
	// Metadata is the service's metadata (e.g. which process serves it).
	Metadata map[string]string
	// Workers is how many micro endpoints of the same name and subject, in
	// one queue group, take each endpoint's requests: the server hands a
	// request to one of them at random. Defaults to DefaultWorkers.
	Workers int
	// AnswerWait is how long a worker waits for its request's answer
	// before it leaves the request to a goroutine of its own and takes the
	// next one. An answer within it goes through micro's request, so
	// micro counts it, its error and its processing time (`nats micro
	// stats`); a later one is published on the reply subject in micro's
	// format by that goroutine, and counted in the endpoint's stats data
	// (EndpointData). So no request waits behind a slow one for more than
	// AnswerWait. Defaults to DefaultAnswerWait.
	AnswerWait time.Duration
	// MaxInFlight is how many requests of each endpoint are being answered
	// at once; at the limit, workers wait for one to end before they take
	// the next. Defaults to 16 × Workers.
	MaxInFlight int
	// Logger receives the answers that could not be sent and the internal
	// errors (code internal) answered. Defaults to zerolog.Nop().
	Logger zerolog.Logger
	// Role is the role (docs/protocol.md §4) whose grants the handlers
	// need, named in the permission_denied answer of a request whose
	// handler ran into a permission violation of Conn. Empty: the answer
	// names no role.
	//
	// Whatever Role says, a permission violation the server reports on
	// Conn while a request is being answered ends that request at once
	// with permission_denied naming the subject (in the server's words),
	// instead of leaving it to wait for a reply the server will never let
	// through. The server does not say which operation a violation
	// belongs to: every request in flight on Conn when it arrives is
	// answered so (unless PermissionSubjects narrows it).
	Role string
	// PermissionSubjects, when set, narrows the watch above to
	// violations of subjects starting with one of these: for a service
	// whose connection also carries operations of other work (a tool
	// worker's, where tool bodies run), whose refusals say nothing about
	// the requests being answered and must not be reported as theirs.
	PermissionSubjects []string
}

// Start registers the micro service with its endpoints and serves them
// until the returned service is stopped; handlers get ctx. It fails with
// ErrInvalidConfig for a Config without Conn or Name or an endpoint
// without a handler, or with micro's error.
func Start(ctx context.Context, cfg Config, endpoints ...Endpoint) (micro.Service, error) {
	if cfg.Conn == nil || cfg.Name == "" {
		return nil, fmt.Errorf("%w: Conn and Name are required", ErrInvalidConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.AnswerWait <= 0 {
		cfg.AnswerWait = DefaultAnswerWait
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 16 * cfg.Workers
	}
	for _, e := range endpoints {
		if e.Handler == nil {
			return nil, fmt.Errorf("%w: endpoint %s has no handler", ErrInvalidConfig, e.Name)
		}
	}
	svc, err := micro.AddService(cfg.Conn, micro.Config{
		Name:        cfg.Name,
		Version:     Version,
		Description: cfg.Description,
		Metadata:    cfg.Metadata,
		StatsHandler: func(ep *micro.Endpoint) any {
			if w, ok := ep.Handler.(*worker); ok {
				return w.data()
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("service: %s: %w", cfg.Name, err)
	}
	perm := watchPermissions(cfg.Conn)
	for _, e := range endpoints {
		slots := make(chan struct{}, cfg.MaxInFlight)
		subject := stream.APISubject(cfg.Prefix, e.Name)
		subjects := []string{subject}
		if TenantScoped(e.Name) {
			subjects = append(subjects, subject+".*")
		}
		for _, sub := range subjects {
			for range cfg.Workers {
				w := &worker{ctx: ctx, nc: cfg.Conn, log: cfg.Logger, h: e.Handler, wait: cfg.AnswerWait, slots: slots, perm: perm, role: cfg.Role, narrow: cfg.PermissionSubjects}
				if sub != subject {
					w.tenantOf = subject + "."
				}
				if err := svc.AddEndpoint(e.Name, w,
					micro.WithEndpointSubject(sub),
					micro.WithEndpointMetadata(EndpointMetadata(e.Name))); err != nil {
					_ = svc.Stop()
					return nil, fmt.Errorf("service: %s endpoint %s: %w", cfg.Name, e.Name, err)
				}
			}
		}
	}
	return svc, nil
}

// consumerAckPrefix begins the reply subject of every message a JetStream
// consumer delivers (its ack subject, with or without a domain).
const consumerAckPrefix = "$JS.ACK."

// worker is one micro endpoint of an endpoint: it takes a request, runs
// its handler in a goroutine (holding one of the endpoint's in-flight
// slots) and waits up to wait for the answer. An answer in time is sent
// through the micro request before Handle returns — micro reads the
// request's state for its stats once Handle returns, so answering through
// it from another goroutine would be a data race and an error micro would
// not count. A later answer is published by the goroutine itself, on the
// reply subject in micro's format, and counted here. So a slow request
// (a call waiting for its result, a prepare during an election) holds its
// worker for at most wait, and the server, which hands requests to the
// endpoints of a queue group at random whether busy or not, never leaves
// a quick one waiting behind it.
//
// A message a JetStream consumer delivered on an endpoint's subject (its
// reply subject is the consumer's ack subject) is dropped unanswered and
// never handled: a consumer's deliver subject is not checked against its
// creator's permissions, so a role that may not publish on the endpoint
// (a worker on jw.api.prepare) could otherwise have a stream's message
// delivered there as a request. Clients' requests reply on an inbox or,
// through an account's import, on _R_.….
type worker struct {
	ctx   context.Context
	nc    *nats.Conn
	log   zerolog.Logger
	h     Handler
	wait  time.Duration
	slots chan struct{}
	// tenantOf, for the endpoints on <subject>.*, is "<subject>.": the
	// rest of a request's subject is its tenant (Caller). Empty for the
	// plain subject.
	tenantOf string
	// perm watches Conn's permission violations (Config.Role).
	perm *permWatch
	// narrow is Config.PermissionSubjects.
	narrow []string
	role   string

	detached, detachedErrors atomic.Uint64
	lastError                atomic.Pointer[string]
}

// EndpointData is the stats data of each micro endpoint (`nats micro
// stats`, EndpointStats.Data): the answers it left to a goroutine of its
// own (Config.AnswerWait), which micro's own counters do not see, and how
// many of them were errors. An endpoint's errors are NumErrors +
// DetachedErrors.
type EndpointData struct {
	Detached          uint64 `json:"detached"`
	DetachedErrors    uint64 `json:"detached_errors"`
	LastDetachedError string `json:"last_detached_error,omitempty"`
}

// Errors is an endpoint's error answers in `nats micro stats`: micro's
// NumErrors plus the DetachedErrors of its data.
func Errors(ep *micro.EndpointStats) int {
	var d EndpointData
	if len(ep.Data) > 0 {
		_ = json.Unmarshal(ep.Data, &d)
	}
	return ep.NumErrors + int(d.DetachedErrors)
}

func (w *worker) data() EndpointData {
	d := EndpointData{Detached: w.detached.Load(), DetachedErrors: w.detachedErrors.Load()}
	if p := w.lastError.Load(); p != nil {
		d.LastDetachedError = *p
	}
	return d
}

// answer is a handler's outcome, encoded: the body, and for an error
// answer its code and one-line description.
type answer struct {
	body       []byte
	code, desc string
}

// Handle implements micro.Handler.
func (w *worker) Handle(req micro.Request) {
	if strings.HasPrefix(req.Reply(), consumerAckPrefix) {
		w.log.Warn().Str("subject", req.Subject()).Str("reply", req.Reply()).Msg("service request delivered by a JetStream consumer dropped: only clients ask")
		return
	}
	select {
	case w.slots <- struct{}{}:
	case <-w.ctx.Done():
		return
	}
	subject, reply, data := req.Subject(), req.Reply(), req.Data()
	// Whoever moves the request off answering first decides who answers:
	// the goroutine with its outcome (answered), or the worker when wait
	// has passed (left: the goroutine answers itself).
	const (
		answered = 1
		left     = 2
	)
	var state atomic.Int32
	done := make(chan answer, 1)
	go func() {
		defer func() { <-w.slots }()
		a := w.run(subject, data, nats.Header(req.Headers()))
		if state.CompareAndSwap(0, answered) {
			done <- a
			return
		}
		w.detached.Add(1)
		if a.code != "" {
			w.detachedErrors.Add(1)
			last := a.code + ": " + a.desc
			w.lastError.Store(&last)
		}
		if reply == "" {
			return
		}
		msg := &nats.Msg{Subject: reply, Data: a.body}
		if a.code != "" {
			msg.Header = nats.Header{micro.ErrorHeader: {a.desc}, micro.ErrorCodeHeader: {a.code}}
		}
		if err := w.nc.PublishMsg(msg); err != nil {
			w.log.Warn().Err(err).Str("subject", subject).Msg("service answer not sent")
		}
	}()
	t := time.NewTimer(w.wait)
	defer t.Stop()
	var a answer
	select {
	case a = <-done:
	case <-t.C:
		if state.CompareAndSwap(0, left) {
			return
		}
		a = <-done // answered meanwhile: it is there, or on its way
	}
	if req.Reply() == "" {
		return // a publish without a reply subject asks for no answer
	}
	if a.code == "" {
		if err := req.Respond(a.body); err != nil {
			w.log.Warn().Err(err).Str("subject", subject).Msg("service answer not sent")
		}
		return
	}
	if err := req.Error(a.code, a.desc, a.body); err != nil {
		w.log.Warn().Err(err).Str("subject", subject).Msg("service error answer not sent")
	}
}

// run runs the handler on data and encodes its outcome. A request on a
// tenant subject runs with its tenant in ctx (Caller); one whose tenant is
// no tenant name is forbidden without running.
func (w *worker) run(subject string, data []byte, h nats.Header) answer {
	var (
		v   any
		err error
	)
	ctx, endSpan := requestSpan(w.ctx, subject, h)
	defer func() { endSpan(err) }()
	if w.tenantOf != "" {
		tenant := strings.TrimPrefix(subject, w.tenantOf)
		if !access.ValidTenant(tenant) {
			err = schema.Errorf(schema.CodeForbidden, "%q names no tenant", subject)
		}
		ctx = withCaller(ctx, tenant)
	}
	if err == nil {
		v, err = w.handle(ctx, data)
	}
	var body []byte
	if raw, ok := v.(RawAnswer); ok && err == nil {
		body = raw
	} else if err == nil {
		if body, err = json.Marshal(v); err != nil {
			err = fmt.Errorf("service: encode answer: %w", err)
		}
	}
	if err == nil {
		return answer{body: body}
	}
	if !errors.As(err, new(*schema.Error)) {
		w.log.Error().Err(err).Str("subject", subject).Msg("service request failed")
	}
	eb := schema.NewErrorBody(err)
	// The micro error code header is numeric (the micro protocol: a client
	// such as nats.js reads it as a number); the jingwei code leads the
	// description, "code: message", on one line, and is the body's.
	desc := string(eb.Error.Code)
	if m := strings.NewReplacer("\r", " ", "\n", " ").Replace(eb.Error.Message); m != "" {
		desc += ": " + m
	}
	b, _ := json.Marshal(eb)
	return answer{body: b, code: eb.Error.Code.StatusText(), desc: desc}
}

// handle runs the handler, ending it with permission_denied when the
// service's connection hits a permission violation meanwhile
// (Config.Role).
func (w *worker) handle(ctx context.Context, data []byte) (any, error) {
	if w.perm == nil {
		return w.h(ctx, data)
	}
	var v any
	err := w.perm.guard(ctx, &permWaiter{any: len(w.narrow) == 0, prefixes: w.narrow}, func(err error) error { return serviceDenied(err, w.role) },
		func(ctx context.Context) (err error) {
			v, err = w.h(ctx, data)
			return err
		})
	return v, err
}

// RawAnswer is an answer a handler encoded itself: it is sent as it is,
// not through json.Marshal (which would escape <, > and & in the strings
// of a stored event jw.api.history passes on as stored).
type RawAnswer []byte

// DecodeBody decodes a request body strictly (schema.Unmarshal) into v; a
// body that does not decode, or has a member whose name differs from one
// of v's only in case ({"Session":…}: schema.CheckMemberCase), is a
// bad_request *schema.Error; other unknown members are ignored. An empty body
// (only white space) leaves v as it is when allowEmpty is set.
func DecodeBody(data []byte, v any, allowEmpty bool) error {
	if allowEmpty && strings.TrimSpace(string(data)) == "" {
		return nil
	}
	// 1.0 is the number 1, as the body's schema says (integer, const 1).
	data = schema.WholeNumbers(data)
	if err := schema.Unmarshal(data, v); err != nil {
		return schema.Errorf(schema.CodeBadRequest, "request body: %v", err)
	}
	// Member names are case-sensitive: {"Session":"x"} names no session
	// and must not be read as a request about every session.
	if err := schema.CheckMemberCase(data, v); err != nil {
		return schema.Errorf(schema.CodeBadRequest, "request body: %v", err)
	}
	return nil
}
