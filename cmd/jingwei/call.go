package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/callreport"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
)

func init() {
	register(command{name: "call", summary: "run a tool through the pipeline and print its result", run: runCall})
}

const callHelp = `  jingwei call --session S --tool NAME [--task T] [--args JSON] [--request-id ID] [--json]

Sends a tool request (docs/protocol.md §5) to the jingwei service (jw.api.call), which
publishes it on jw.requests.<session> for a tool worker, waits for the call's
tool.result on the session log and answers with it. A request id is made up
when none is given; sending the same --request-id again never runs the tool a
second time.

Output: the result (call id, status, output or error) as text; with --json
one JSON object instead: the tool.result event when it is ok, the error body
with the event otherwise. A refusal before any call (no event) is the error
body, with or without --json. stdout never mixes text and JSON.

Exit status:
  0  the tool ran and its result is ok
  1  unexpected failure: no jingwei service answers (start 'jingwei serve' or
     'jingwei worker')
  2  usage: a missing or bad flag, --args that is not JSON
  3  refused or not ok: {"error":{"code":…,"message":…}} on stdout, with the
     service's code (invalid_request, unknown_tool, …; result_pending when the
     tool worker saw no result in its time, approval_pending when the call
     waits for approval, permission_denied at once when the credentials
     may not call, no_answer when no answer came
     within --timeout: the call may still run, see 'jingwei status') or the
     result's status (rejected, failed, timeout, cancelled, budget_exhausted,
     output_limit); with --json the tool.result is included as "event";
     without it a not-ok result is the text above
  4  unreachable: the server did not accept the connection within 2 s`

// clientFlags are the flags of every client command: the connection flags
// of docs/protocol.md §13 (natsFlags: --server, --creds, --nkey, --tlsca, --prefix),
// --timeout and the log flags.
type clientFlags struct {
	nats    natsFlags
	timeout time.Duration
	log     logFlags
}

func (c *clientFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	c.nats.register(fs)
	fs.DurationVar(&c.timeout, "timeout", timeout, "how long to wait for the server and the service's answer (connecting included)")
	c.log.register(fs)
}

// connect connects to the server the flags name and returns a client for
// the service. The caller closes it.
func (c *clientFlags) connect(ctx context.Context, name string, stderr io.Writer) (*apiClient, error) {
	log, err := c.log.logger(stderr)
	if err != nil {
		return nil, err
	}
	// A server that does not accept the connection within 2 s is
	// unreachable: the rest of --timeout is for the answer.
	c.nats.connectTimeout = min(c.timeout, clientConnectTimeout)
	nc, err := c.nats.connect(ctx, name, log)
	if err != nil {
		return nil, err
	}
	cl := service.NewClient(nc, service.ClientConfig{Prefix: c.nats.prefix, Timeout: c.timeout, Role: string(commandRole[name])})
	return &apiClient{Client: cl, nc: nc, prefix: c.nats.prefix, timeout: c.timeout, log: log}, nil
}

// clientConnectTimeout bounds a client command's first connection.
const clientConnectTimeout = 2 * time.Second

// apiClient is the typed client of the jingwei services (jw.api.*) on the
// CLI's connection.
type apiClient struct {
	*service.Client
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
	log     zerolog.Logger
}

func (a *apiClient) Close() { a.nc.Close() }

// explain adds what the CLI's user can do to the client's errors: start
// a service, raise --timeout.
func explain(err error) error {
	var e *schema.Error
	switch {
	case errors.Is(err, service.ErrNoService):
		return fmt.Errorf("%w: start 'jingwei serve' (all in one), or 'jingwei recover' and 'jingwei worker', against this server", err)
	case errors.Is(err, schema.ErrNoAnswer) && errors.As(err, &e):
		return &schema.Error{Code: e.Code, Message: e.Message + "; raise --timeout or check 'jingwei status'", Err: e.Err}
	}
	return err
}

// printError prints err as the error body ({"error":{"code","message"}},
// schema.NewErrorBody) on stdout and returns the exit status: exitRefused
// for a coded refusal, exitFailure for anything else (code "internal";
// also the service's own internal errors).
func printError(stdout io.Writer, err error) int {
	return printErrorBody(stdout, explain(err), nil)
}

// printErrorBody prints the error body of err, with the event when there
// is one ({"error":…,"event":…}), and returns the exit status.
func printErrorBody(stdout io.Writer, err error, ev *schema.Event) int {
	body := schema.NewErrorBody(err)
	if ev != nil {
		_ = writeJSON(stdout, struct {
			schema.ErrorBody
			Event *schema.Event `json:"event"`
		}{body, ev})
	} else {
		_ = writeJSON(stdout, body)
	}
	switch body.Error.Code {
	case schema.CodeInternal:
		return exitFailure
	case schema.CodeUnreachable:
		return exitUnreachable
	}
	return exitRefused
}

// newRequestID returns a fresh request id, "r-" and 16 hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "r-" + hex.EncodeToString(b[:])
}

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("call", "Run a tool through the pipeline and print its result.", callHelp, stderr)
	var cf clientFlags
	cf.register(fs, time.Minute)
	session := fs.String("session", "", "session id, [A-Za-z0-9_-]{1,128} (required)")
	task := fs.String("task", worker.DefaultTask, "task inside the session: the scope in which operation keys and budgets count (a request on the wire always names one)")
	tool := fs.String("tool", "", "tool name, e.g. orders.create (required)")
	argsJSON := fs.String("args", "{}", "tool arguments as a JSON object")
	requestID := fs.String("request-id", "", "your id for this intent; re-sending it never runs the tool twice (default: a new one)")
	provider := fs.String("provider-call-id", "", "the model provider's id for the call, recorded on tool.call")
	asJSON := fs.Bool("json", false, "print the tool.result event as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if err := stream.ValidateSession(*session); err != nil {
		return usageError(stderr, "call", "--session: %v", err)
	}
	if *tool == "" {
		return usageError(stderr, "call", "--tool is required (the example tools are orders.create, payments.charge, catalog.lookup)")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(*argsJSON), &probe); err != nil {
		return usageError(stderr, "call", "--args must be a JSON object: %v", err)
	}
	if *requestID == "" {
		*requestID = newRequestID()
	}
	if _, err := cf.log.logger(stderr); err != nil {
		return usageError(stderr, "call", "%v", err)
	}
	api, err := cf.connect(ctx, "call", stderr)
	if err != nil {
		return printError(stdout, err)
	}
	defer api.Close()

	req := schema.Request{
		V: schema.Version, RequestID: *requestID, Session: *session, Task: *task,
		Tool: *tool, Arguments: json.RawMessage(*argsJSON), ProviderCallID: *provider,
	}
	ev, err := api.Call(ctx, req)
	if err != nil {
		return printError(stdout, err)
	}
	if ev.Result == nil {
		return printError(stdout, fmt.Errorf("the service answered without a tool.result (type %q)", ev.Type))
	}
	if *asJSON {
		if ev.Result.Status != schema.StatusOK {
			return printErrorBody(stdout, callreport.ResultError(&ev), &ev)
		}
		_ = writeJSON(stdout, ev)
		return exitOK
	}
	callreport.WriteResult(stdout, ev, *requestID, *tool)
	if ev.Result.Status != schema.StatusOK {
		// The table says it all: stdout holds human text or JSON, never
		// both (the error body is what --json prints).
		fmt.Fprintf(stdout, "\nthe call is recorded; see what recovery allows with: jingwei status --session %s\n", ev.Session)
		return exitRefused
	}
	return exitOK
}
