package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Handler answers one request body: the value to answer with (sent as
// JSON), or an error (sent as the error body and micro's error headers,
// and counted by micro's stats). ctx ends when the service's context
// does.
type Handler func(ctx context.Context, body []byte) (any, error)

// Endpoint is one endpoint a service serves.
type Endpoint struct {
	// Name is the endpoint name (EndpointCall, …); it is served on
	// <prefix>.api.<Name> with EndpointMetadata(Name).
	Name string
	// Handler answers its requests. Required.
	Handler Handler
}

// DefaultWorkers is how many requests of one endpoint a service answers at
// once (Config.Workers).
const DefaultWorkers = 8

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
	// Workers is how many requests of each endpoint are answered at once.
	// Each worker is a micro endpoint of the same name and subject in one
	// queue group, and answers through the request inside its handler, so
	// micro counts every request, error and its processing time (`nats
	// micro stats`); a request waits behind the one its worker is
	// answering. Defaults to DefaultWorkers.
	Workers int
	// Logger receives the answers that could not be sent and the internal
	// errors (code internal) answered. Defaults to zerolog.Nop().
	Logger zerolog.Logger
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
	svc, err := micro.AddService(cfg.Conn, micro.Config{
		Name:        cfg.Name,
		Version:     Version,
		Description: cfg.Description,
		Metadata:    cfg.Metadata,
	})
	if err != nil {
		return nil, fmt.Errorf("service: %s: %w", cfg.Name, err)
	}
	for _, e := range endpoints {
		if e.Handler == nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("%w: endpoint %s has no handler", ErrInvalidConfig, e.Name)
		}
		h := handler(ctx, cfg.Logger, e.Handler)
		for range cfg.Workers {
			if err := svc.AddEndpoint(e.Name, h,
				micro.WithEndpointSubject(stream.APISubject(cfg.Prefix, e.Name)),
				micro.WithEndpointMetadata(EndpointMetadata(e.Name))); err != nil {
				_ = svc.Stop()
				return nil, fmt.Errorf("service: %s endpoint %s: %w", cfg.Name, e.Name, err)
			}
		}
	}
	return svc, nil
}

// consumerAckPrefix begins the reply subject of every message a JetStream
// consumer delivers (its ack subject, with or without a domain).
const consumerAckPrefix = "$JS.ACK."

// handler answers each request through req before it returns: micro reads
// the request's state for its stats once the handler returns, so the
// answer must not be sent from another goroutine after that (a data race,
// and an error micro would not count).
//
// A message a JetStream consumer delivered on an endpoint's subject (its
// reply subject is the consumer's ack subject) is dropped unanswered and
// never handled: a consumer's deliver subject is not checked against its
// creator's permissions, so a role that may not publish on the endpoint
// (a worker on jw.api.prepare) could otherwise have a stream's message
// delivered there as a request. Clients' requests reply on an inbox or,
// through an account's import, on _R_.….
func handler(ctx context.Context, log zerolog.Logger, h Handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		if strings.HasPrefix(req.Reply(), consumerAckPrefix) {
			log.Warn().Str("subject", req.Subject()).Str("reply", req.Reply()).Msg("service request delivered by a JetStream consumer dropped: only clients ask")
			return
		}
		v, err := h(ctx, req.Data())
		if req.Reply() == "" {
			return // a publish without a reply subject asks for no answer
		}
		var body []byte
		if err == nil {
			if body, err = json.Marshal(v); err != nil {
				err = fmt.Errorf("service: encode answer: %w", err)
			}
		}
		if err == nil {
			if rerr := req.Respond(body); rerr != nil {
				log.Warn().Err(rerr).Str("subject", req.Subject()).Msg("service answer not sent")
			}
			return
		}
		if !errors.As(err, new(*schema.Error)) {
			log.Error().Err(err).Str("subject", req.Subject()).Msg("service request failed")
		}
		eb := schema.NewErrorBody(err)
		// The description travels in a header: one line, never empty.
		desc := strings.NewReplacer("\r", " ", "\n", " ").Replace(eb.Error.Message)
		if desc == "" {
			desc = string(eb.Error.Code)
		}
		b, _ := json.Marshal(eb)
		if rerr := req.Error(string(eb.Error.Code), desc, b); rerr != nil {
			log.Warn().Err(rerr).Str("subject", req.Subject()).Msg("service error answer not sent")
		}
	})
}

// DecodeBody decodes a request body strictly (schema.Unmarshal) into v; a
// body that does not decode is a bad_request *schema.Error. An empty body
// (only white space) leaves v as it is when allowEmpty is set.
func DecodeBody(data []byte, v any, allowEmpty bool) error {
	if allowEmpty && strings.TrimSpace(string(data)) == "" {
		return nil
	}
	if err := schema.Unmarshal(data, v); err != nil {
		return schema.Errorf(schema.CodeBadRequest, "request body: %v", err)
	}
	return nil
}
