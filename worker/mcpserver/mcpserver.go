// Package mcpserver is jingwei as an MCP server ('jingwei mcp'): an MCP
// client (Claude, Cursor, an agent framework's MCP adapter) lists the
// deployment's tools and calls them through jw.api.call, so that every
// call is recorded on a session log and recovered by its host-owned
// contract.
//
//   - tools/list: the catalog's tools, with annotations derived from the
//     host's contract (never copied from a backend) and the contract in
//     _meta ("io.jingwei/contract").
//   - tools/call: a tool request in the session the client names in _meta
//     ("io.jingwei/session"), else one bound to the MCP session; its
//     request id is the client's ("io.jingwei/request-id" in _meta), else
//     derived from the MCP session and the JSON-RPC id (over HTTP), so a
//     re-sent request gets the stored result and the tool runs once.
//   - an ok result is content (the output as text) and, for a JSON object,
//     structuredContent; anything else — a refusal, a failure, a timeout,
//     a call waiting for approval or review, an outcome not known yet — is
//     a tool error result whose text starts with the jingwei code and says
//     what a model can do, with the code in _meta ("io.jingwei/code").
//     Never a success that did not happen.
//
// The server holds no review, approval or plan powers: it only calls.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/mcptool"
)

// _meta keys read from a tools/call and written on its result.
const (
	// MetaSession names the jingwei session of a call (client → server,
	// and on every result).
	MetaSession = mcptool.MetaSession
	// MetaTask names the task (client → server); default worker.DefaultTask.
	MetaTask = mcptool.MetaTask
	// MetaRequestID is the client's id of the intent: re-sent, the call
	// runs once and the stored result is answered.
	MetaRequestID = "io.jingwei/request-id"
	// MetaCode is the jingwei code of a result that is not ok.
	MetaCode = "io.jingwei/code"
	// MetaCallID is the call id of the result.
	MetaCallID = mcptool.MetaCallID
	// MetaContract is a tool's host-owned contract in tools/list.
	MetaContract = mcptool.MetaContract
	// HeaderRPCID is set by HTTP's wrapper to the JSON-RPC id of a
	// tools/call; HeaderAgent to the authenticated agent. Both are removed
	// from what a client sends.
	HeaderRPCID = "X-Jingwei-Rpc-Id"
	HeaderAgent = "X-Jingwei-Agent"
)

// Caller sends a tool request to jw.api.call (*service.Client).
type Caller interface {
	Call(ctx context.Context, q schema.Request) (schema.Event, error)
}

// Config configures a Server.
type Config struct {
	// Caller sends the calls. Required.
	Caller Caller
	// Tools are the tools to list (their metadata and input schema; the
	// bodies are not used: the tool workers run them).
	Tools []worker.Tool
	// Name is the server's name in initialize; default "jingwei".
	Name string
	// Logger defaults to a disabled logger.
	Logger zerolog.Logger
	// ProgressEvery is how often a call that waits for its result (running,
	// or waiting for an approval) sends notifications/progress to a client
	// that gave a progress token. Default 5 s.
	ProgressEvery time.Duration
}

// New returns the MCP server of cfg.
func New(cfg Config) *mcp.Server {
	name := cfg.Name
	if name == "" {
		name = "jingwei"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	stdioID := randomID()
	for _, t := range cfg.Tools {
		s.AddTool(ListEntry(t), handler(cfg, t.Metadata.Name, stdioID))
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// Annotations are the MCP annotations of a host contract: hints derived
// from what the host declared, for the clients that read them.
func Annotations(c effect.Contract) *mcp.ToolAnnotations {
	switch c.Effect {
	case effect.ReadOnly:
		return &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false)}
	case effect.Idempotent:
		return &mcp.ToolAnnotations{IdempotentHint: true}
	case effect.NonIdempotent:
		return &mcp.ToolAnnotations{DestructiveHint: ptr(true)}
	}
	return &mcp.ToolAnnotations{} // unknown: the protocol's defaults (may destroy, not idempotent)
}

// ListEntry is the tools/list entry of t.
func ListEntry(t worker.Tool) *mcp.Tool {
	in := any(json.RawMessage(`{"type":"object"}`))
	if len(t.InputSchema) > 0 {
		in = t.InputSchema
	}
	return &mcp.Tool{
		Name: t.Metadata.Name, Description: t.Metadata.Description, InputSchema: in,
		Annotations: Annotations(t.Metadata.Contract),
		Meta: mcp.Meta{MetaContract: map[string]string{
			"effect": t.Metadata.Contract.Effect.String(), "revision": t.Metadata.Contract.Revision,
		}},
	}
}

var unsafeToken = regexp.MustCompile(`[^A-Za-z0-9_-]`)

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func digest(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:10])
}

// route returns the session, task and request id of a tools/call.
func route(req *mcp.CallToolRequest, stdioID string) (session, task, requestID string, err error) {
	meta := req.Params.Meta
	var agent, rpcID string
	if req.Extra != nil && req.Extra.Header != nil {
		agent, rpcID = req.Extra.Header.Get(HeaderAgent), req.Extra.Header.Get(HeaderRPCID)
	}
	mcpSession := req.Session.ID()
	if mcpSession == "" {
		mcpSession = stdioID
	}
	session, _ = meta[MetaSession].(string)
	if session == "" {
		session = "mcp-" + unsafeToken.ReplaceAllString(agent, "_")
		if agent == "" {
			session = "mcp"
		}
		session += "-" + digest(agent, mcpSession)
		if len(session) > schema.MaxSessionBytes {
			session = "mcp-" + digest(agent, mcpSession)
		}
	}
	if !schema.ValidSession(session) {
		return "", "", "", fmt.Errorf("%s %q is not a session id: 1-%d of A-Z a-z 0-9 _ -", MetaSession, session, schema.MaxSessionBytes)
	}
	task, _ = meta[MetaTask].(string)
	if task == "" {
		task = worker.DefaultTask
	}
	requestID, _ = meta[MetaRequestID].(string)
	switch {
	case requestID != "":
	case rpcID != "":
		requestID = "mcp-" + digest(agent, mcpSession, rpcID)
	default:
		requestID = "mcp-" + randomID()
	}
	return session, task, requestID, nil
}

func handler(cfg Config, tool, stdioID string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		session, task, requestID, err := route(req, stdioID)
		if err != nil {
			return toolError(schema.CodeInvalidRequest, err.Error(), "Fix the _meta of the call.", nil), nil
		}
		ctx, endSpan := callSpan(ctx, req.Params.Meta, tool)
		defer endSpan()
		if tok := req.Params.GetProgressToken(); tok != nil {
			stop := progress(ctx, req, tok, cfg.ProgressEvery)
			defer stop()
		}
		args := req.Params.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		ev, err := cfg.Caller.Call(ctx, schema.Request{
			V: schema.Version, RequestID: requestID, Session: session, Task: task, Tool: tool, Arguments: args,
		})
		ids := mcp.Meta{MetaSession: session, MetaRequestID: requestID}
		if err != nil {
			code := schema.CodeOf(err)
			if code == "" {
				code = schema.CodeInternal
			}
			cfg.Logger.Debug().Err(err).Str("session", session).Str("request_id", requestID).Msg("tools/call not answered with a result")
			return toolError(code, err.Error(), advice(code, requestID), ids), nil
		}
		if ev.Result == nil {
			return toolError(schema.CodeInternal, "the service answered without a tool.result", advice(schema.CodeInternal, requestID), ids), nil
		}
		r := ev.Result
		ids[MetaCallID] = r.CallID
		if r.Status != schema.StatusOK {
			code := schema.Code(r.Status)
			msg := r.Error
			if r.Stage != "" {
				msg = fmt.Sprintf("rejected at stage %s: %s", r.Stage, r.Error)
			}
			return toolError(code, msg, advice(code, requestID), ids), nil
		}
		return okResult(r.Output, ids), nil
	}
}

// progress sends notifications/progress for tok every period until the
// returned stop is called: the call is still waiting for its result (the
// tool running, or the call waiting for a person's approval).
func progress(ctx context.Context, req *mcp.CallToolRequest, tok any, every time.Duration) func() {
	if every <= 0 {
		every = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: float64(n),
					Message: "waiting for the tool's result (it may be running, or waiting for a person's approval)",
				})
			}
		}
	}()
	return func() { cancel(); <-done }
}

// okResult is the MCP result of an ok output.
func okResult(out json.RawMessage, meta mcp.Meta) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Meta: meta}
	var s string
	switch {
	case len(out) == 0:
		res.Content = []mcp.Content{&mcp.TextContent{Text: "ok"}}
	case json.Unmarshal(out, &s) == nil:
		res.Content = []mcp.Content{&mcp.TextContent{Text: s}}
	default:
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(out)}}
		var obj map[string]any
		if json.Unmarshal(out, &obj) == nil && obj != nil {
			res.StructuredContent = json.RawMessage(out)
		}
	}
	return res
}

// toolError is a tool error result: the code first, then what happened,
// then what to do.
func toolError(code schema.Code, msg, what string, meta mcp.Meta) *mcp.CallToolResult {
	if meta == nil {
		meta = mcp.Meta{}
	}
	meta[MetaCode] = string(code)
	return &mcp.CallToolResult{
		IsError: true, Meta: meta,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("jingwei %s: %s. %s", code, strings.TrimSuffix(msg, "."), what)}},
	}
}

// advice is the sentence a model can act on for code.
func advice(code schema.Code, requestID string) string {
	again := fmt.Sprintf("Call again with the same arguments and _meta %q: %q to get its result; a new request id could run the tool a second time.", MetaRequestID, requestID)
	switch code {
	case schema.CodeResultPending, schema.CodeNoAnswer, schema.CodeApprovalPending:
		return "The call was accepted but its result is not known yet (it may be running or waiting for a person's approval). Do not assume it succeeded or failed. " + again
	case schema.CodeTimeout, schema.CodeCancelled:
		return "The outcome is uncertain: the tool may or may not have acted. Do not retry with a new request; a person or the host's recovery decides whether it may run again."
	case schema.CodeFailed:
		return "The tool reported a failure or gave no answer; it may have acted. Do not retry with a new request unless the error shows nothing happened."
	case schema.CodeRejected, schema.CodeUnknownTool, schema.CodeInvalidRequest, schema.CodeInvalidCall, schema.CodeRequestTooLarge, schema.CodeFieldTooLong:
		return "The call was refused before it ran; nothing happened. Fix the arguments or choose another tool."
	case schema.CodeBudgetExhausted, schema.CodeTaskStopped:
		return "The task may not make more calls; tell the user."
	case schema.CodeNeedsReview:
		return "A person must review an earlier uncertain call before this can go on; tell the user."
	case schema.CodeRequestConflict:
		return "That request id was used for another call; use a new request id for a new intent."
	case schema.CodeBusy, schema.CodeLog:
		return "jingwei is busy or its log is unavailable; nothing may have run. " + again
	}
	return "Tell the user; do not assume the tool acted or did not act. " + again
}

// errUnauthorized is what HTTP answers a request without a known token.
var errUnauthorized = errors.New("unauthorized")
