package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// DefaultTimeout bounds one Client request (ClientConfig.Timeout).
const DefaultTimeout = 30 * time.Second

// ClientConfig configures a Client. Every field has a default.
type ClientConfig struct {
	// Prefix is the topology's subject prefix. Defaults to
	// stream.DefaultPrefix ("jw").
	Prefix string
	// Timeout bounds each request, on top of the deadline of its ctx.
	// Defaults to DefaultTimeout. A call waits for its tool's result:
	// give it more than the service's own call timeout.
	Timeout time.Duration
	// Role is the role the connection's credentials are meant to have
	// (docs/protocol.md §4), named in a permission_denied error: "" names
	// none.
	Role string
}

// Client is a typed client of the `jingwei` services (jw.api.*): one
// method per endpoint, ctx first. An error answer is returned as a
// *schema.Error with the service's code (match it with the schema
// sentinels); no service is ErrNoService; no answer within the timeout is
// a no_answer *schema.Error. Safe for concurrent use; the zero value is
// not usable, build it with NewClient.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
	role    string
	perm    *permWatch
}

// NewClient returns a client that sends its requests on nc. The caller
// keeps nc and closes it. It installs a handler of the server's
// permission violations in front of nc's asynchronous error handler (which
// still sees every error), so that a request the credentials may not make
// fails at once with permission_denied instead of waiting for its
// timeout; build one Client per connection.
func NewClient(nc *nats.Conn, cfg ClientConfig) *Client {
	if cfg.Prefix == "" {
		cfg.Prefix = stream.DefaultPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Client{nc: nc, prefix: cfg.Prefix, timeout: cfg.Timeout, role: cfg.Role, perm: watchPermissions(nc)}
}

// Call sends the tool request q to jw.api.call and returns the tool.result
// event it ended with, as the session log holds it. A request refused for
// good comes back as the code the tool worker recorded (unknown_tool,
// invalid_request, request_too_large, history_too_large); no result in
// the service's time is result_pending (the call may still run: ask again
// with the same request id). A result that is not ok is not an error here:
// read its Status.
func (c *Client) Call(ctx context.Context, q schema.Request) (schema.Event, error) {
	var ev schema.Event
	err := c.Request(ctx, EndpointCall, q, &ev)
	return ev, err
}

// Inspect asks jw.api.inspect for the assessment of callID in session.
func (c *Client) Inspect(ctx context.Context, session, callID string) (schema.Assessment, error) {
	var a schema.Assessment
	err := c.Request(ctx, EndpointInspect, Target{Session: session, CallID: callID}, &a)
	return a, err
}

// Prepare asks jw.api.prepare for the retry plan of callID in session.
func (c *Client) Prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	var p schema.Plan
	err := c.Request(ctx, EndpointPrepare, Target{Session: session, CallID: callID}, &p)
	return p, err
}

// Status asks jw.api.status (the zero StatusRequest: every session).
func (c *Client) Status(ctx context.Context, req StatusRequest) (Status, error) {
	var st Status
	err := c.Request(ctx, EndpointStatus, req, &st)
	return st, err
}

// Request sends body as JSON to the endpoint and decodes the answer into
// out: the generic form of the typed methods, for endpoints they do not
// cover.
func (c *Client) Request(ctx context.Context, endpoint string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("service: encode %s request: %w", endpoint, err)
	}
	subj := stream.APISubject(c.prefix, endpoint)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var msg *nats.Msg
	err = c.Guard(ctx, []string{subj}, func(ctx context.Context) error {
		var err error
		msg, err = request(ctx, c.nc, subj, b)
		return err
	})
	var perm *schema.Error
	switch {
	case errors.As(err, &perm) && perm.Code == schema.CodePermissionDenied:
		return perm
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w on %s", ErrNoService, subj)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return &schema.Error{Code: schema.CodeNoAnswer, Message: fmt.Sprintf("no answer on %s within %s: the request may still be running (a call may also wait for approval: jingwei status), or no service instance took it in time", subj, c.timeout), Err: err}
	case err != nil:
		return fmt.Errorf("service: request %s: %w", subj, err)
	}
	if e := AnswerError(msg); e != nil {
		return e
	}
	if err := schema.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("%w: the answer of %s is not what this client expects (%v): %.200s", ErrUnexpectedAnswer, subj, err, msg.Data)
	}
	return nil
}

// AnswerError returns the error an answer carries, or nil for an ordinary
// answer: the error body (schema.DecodeErrorBody), else micro's error
// headers: the jingwei code at the head of the description ("code:
// message"; internal when it names none). The code header is the numeric
// status (docs/protocol.md §5.7), never the jingwei code.
func AnswerError(msg *nats.Msg) *schema.Error {
	if e, ok := schema.DecodeErrorBody(msg.Data); ok {
		return e
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		code, text, ok := strings.Cut(desc, ": ")
		if !ok || !codeRE.MatchString(code) {
			return &schema.Error{Code: schema.CodeInternal, Message: desc}
		}
		return &schema.Error{Code: schema.Code(code), Message: text}
	}
	return nil
}

// AnswerCode returns the jingwei code of an error answer (AnswerError),
// "" for an ordinary answer.
func AnswerCode(msg *nats.Msg) string {
	if e := AnswerError(msg); e != nil {
		return string(e.Code)
	}
	return ""
}

var codeRE = regexp.MustCompile(`^[a-z][a-z_]*$`)
