// Package mcptool runs the tools of an MCP server as jingwei tool bodies.
//
// A Backend holds one MCP client session per server, made on first use and
// made again (initialize, tools/list) after the server went away — a stdio
// server that exited, a streamable-HTTP server that forgot the session
// after a restart (a ping before a tools/call to a server that has been
// quiet for Config.PingAfter finds a dead connection or session before
// the call is sent). tools/call is sent only from a body, that is after the
// call's tool.started is on the session log, and carries the call's
// operation key and fencing token in _meta (MetaOperationKey, MetaFence …)
// so that a server that deduplicates or fences its writes can.
//
// What becomes of an answer:
//   - a result → ok, its output the structuredContent, else the text of a
//     single text content (a JSON string), else {"content": [...]};
//   - isError: true → failed;
//   - the body's context ends (the tool's timeout) → the context's error,
//     which the runtime records as timeout; the SDK sends
//     notifications/cancelled for the request;
//   - the connection fails or closes after the request was sent → failed
//     without retryable: no result came, so nothing is claimed about the
//     effect and recovery treats the call as uncertain.
//
// A server's annotations (readOnlyHint, idempotentHint, destructiveHint)
// are read by Tools for display only: they never decide anything.
package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/worker"
)

// The _meta keys of a tools/call sent by a Backend.
const (
	// MetaOperationKey is "<task>/<key>": stable across retries of one
	// operation; a server deduplicates on it.
	MetaOperationKey = "io.jingwei/operation-key"
	// MetaFence is the fencing token (worker.Fence as a JSON object).
	MetaFence = "io.jingwei/fence"
	// MetaTask, MetaSession and MetaCallID name the call (the call id is
	// new on every attempt: never deduplicate on it).
	MetaTask    = "io.jingwei/task"
	MetaSession = "io.jingwei/session"
	MetaCallID  = "io.jingwei/call-id"
	// MetaContract is the host-owned contract ({"effect","revision"}): in
	// a tools/call, the contract the call runs under; in a tools/list
	// entry of 'jingwei mcp', the tool's.
	MetaContract = "io.jingwei/contract"
)

// Config describes one MCP server: a stdio command or a streamable-HTTP URL.
type Config struct {
	// Name names the server in errors and logs.
	Name string
	// Command, Args, Env (added to the worker's environment) and Dir start
	// a stdio server.
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// URL is a streamable-HTTP endpoint; Headers go with every request.
	URL     string
	Headers map[string]string
	// PingAfter is how long a streamable-HTTP server may have been quiet
	// (no answer from it) before a tools/call is preceded by a ping: a
	// server that restarted, or closed an idle connection, in that time
	// costs the ping (safe to lose) instead of making the call uncertain.
	// A server that answered within it is not pinged: the busy path pays
	// one round trip per call, not two. Defaults to DefaultPingAfter;
	// negative: ping before every call.
	PingAfter time.Duration
}

// DefaultPingAfter is Config.PingAfter's default.
const DefaultPingAfter = time.Second

// Connection pool of a streamable-HTTP backend: enough idle connections
// for the calls a worker runs at once (http.DefaultTransport keeps 2 per
// host, so 16 concurrent calls would dial and close 14 connections per
// round), closed by the client after idleConnTimeout — shorter than the
// keep-alive timeout of common servers (Node's 5 s), so a server never
// closes a connection just as the client sends a call on it.
const (
	maxIdleConns    = 256
	idleConnTimeout = 2 * time.Second
)

// Backend is one MCP server as seen by a tool worker. Safe for concurrent
// use.
type Backend struct {
	cfg    Config
	client *mcp.Client
	http   *http.Client // streamable HTTP: one connection pool for every session

	// heard is when the server last answered (UnixNano).
	heard atomic.Int64

	mu    sync.Mutex
	sess  *mcp.ClientSession
	dead  chan struct{} // closed when sess ended
	tools map[string]*mcp.Tool
	// connects counts the sessions made.
	connects int
}

// Connects returns how many sessions the backend has made (1 while the
// first lives; one more after each loss of the server).
func (b *Backend) Connects() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.connects
}

// New returns a backend for cfg; it connects on first use.
func New(cfg Config) *Backend {
	if cfg.PingAfter == 0 {
		cfg.PingAfter = DefaultPingAfter
	}
	b := &Backend{cfg: cfg, client: mcp.NewClient(&mcp.Implementation{Name: "jingwei", Version: "1"}, nil)}
	if cfg.URL != "" {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout = maxIdleConns, maxIdleConns, idleConnTimeout
		b.http = &http.Client{Transport: headerRoundTripper{h: cfg.Headers, next: tr}}
	}
	return b
}

// Name returns the server's name.
func (b *Backend) Name() string { return b.cfg.Name }

type headerRoundTripper struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

// CloseIdleConnections closes the pool's idle connections (through
// http.Client.CloseIdleConnections).
func (h headerRoundTripper) CloseIdleConnections() {
	if c, ok := h.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (b *Backend) transport() mcp.Transport {
	if b.cfg.URL != "" {
		return &mcp.StreamableClientTransport{Endpoint: b.cfg.URL, HTTPClient: b.http, MaxRetries: -1, DisableStandaloneSSE: true}
	}
	cmd := exec.Command(b.cfg.Command, b.cfg.Args...)
	cmd.Dir = b.cfg.Dir
	if len(b.cfg.Env) > 0 {
		cmd.Env = os.Environ()
		for k, v := range b.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stderr = os.Stderr
	return &mcp.CommandTransport{Command: cmd}
}

// session returns the live session, connecting (initialize, tools/list)
// when there is none or the last one ended.
func (b *Backend) session(ctx context.Context) (*mcp.ClientSession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sess != nil {
		select {
		case <-b.dead:
			b.sess = nil
		default:
			return b.sess, nil
		}
	}
	s, err := b.client.Connect(ctx, b.transport(), nil)
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: connect: %w", b.cfg.Name, err)
	}
	tools := map[string]*mcp.Tool{}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("mcp server %s: tools/list: %w", b.cfg.Name, err)
		}
		tools[t.Name] = t
	}
	dead := make(chan struct{})
	go func() { _ = s.Wait(); close(dead) }()
	b.sess, b.dead, b.tools = s, dead, tools
	b.connects++
	b.heardNow()
	return s, nil
}

// drop forgets s if it is still the current session, and closes it.
func (b *Backend) drop(s *mcp.ClientSession) {
	b.mu.Lock()
	if b.sess == s {
		b.sess = nil
	}
	b.mu.Unlock()
	_ = s.Close()
}

// Tools connects if needed and returns the server's tools by name, as the
// last tools/list returned them.
func (b *Backend) Tools(ctx context.Context) (map[string]*mcp.Tool, error) {
	if _, err := b.session(ctx); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tools, nil
}

// Close ends the session (a stdio server's process with it).
func (b *Backend) Close() error {
	b.mu.Lock()
	s := b.sess
	b.sess = nil
	b.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	if b.http != nil {
		b.http.CloseIdleConnections()
	}
	return err
}

// Meta returns the _meta of a tools/call for req.
func Meta(req worker.BodyRequest) mcp.Meta {
	return mcp.Meta{
		MetaOperationKey: req.Operation.Task + "/" + req.Operation.Key,
		MetaTask:         req.Operation.Task,
		MetaSession:      req.Session,
		MetaCallID:       req.CallID,
		MetaContract:     map[string]any{"effect": req.Operation.Contract.Effect.String(), "revision": req.Operation.Contract.Revision},
		MetaFence: map[string]any{
			"session": req.Fence.Session, "epoch": req.Fence.Epoch, "call_id": req.Fence.CallID,
			"task": req.Fence.Task, "key": req.Fence.Key,
		},
	}
}

// ErrToolError is the error of a result with isError: true.
var ErrToolError = errors.New("the MCP tool reported an error")

// Body returns the body of the server's tool named tool.
func (b *Backend) Body(tool string) worker.Body {
	return func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		s, err := b.session(ctx)
		if err != nil {
			// Nothing was sent: no effect. Retryable advice only.
			return nil, worker.Retryable(err)
		}
		if b.cfg.URL != "" && b.quiet() {
			// A streamable-HTTP server that restarted while it was quiet
			// leaves a dead keep-alive connection or a forgotten session:
			// find out with a ping (safe to lose) rather than with the
			// tools/call, whose loss would make the call uncertain.
			if perr := s.Ping(ctx, nil); perr != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				b.drop(s)
				if s, err = b.session(ctx); err != nil {
					return nil, worker.Retryable(err)
				}
			} else {
				b.heardNow()
			}
		}
		params := &mcp.CallToolParams{Meta: Meta(req), Name: tool, Arguments: req.Arguments}
		res, err := s.CallTool(ctx, params)
		if err != nil && errors.Is(err, mcp.ErrSessionMissing) {
			// The server does not know the session (it restarted): it
			// refused the request without running it. Once more, anew.
			b.drop(s)
			if s, err = b.session(ctx); err != nil {
				return nil, worker.Retryable(err)
			}
			res, err = s.CallTool(ctx, params)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err() // timeout or cancelled; notifications/cancelled went out
			}
			if errors.Is(err, mcp.ErrConnectionClosed) {
				b.drop(s)
			}
			// Sent, and no answer: the outcome is unknown. Not retryable,
			// so recovery treats the call as uncertain.
			return nil, fmt.Errorf("mcp server %s: tools/call %s: no result: %w", b.cfg.Name, tool, err)
		}
		b.heardNow()
		if res.IsError {
			return nil, fmt.Errorf("%w: %s", ErrToolError, Text(res))
		}
		return Output(res)
	}
}

// heardNow notes that the server answered.
func (b *Backend) heardNow() { b.heard.Store(time.Now().UnixNano()) }

// quiet reports whether the server has not answered for PingAfter.
func (b *Backend) quiet() bool {
	return b.cfg.PingAfter < 0 || time.Since(time.Unix(0, b.heard.Load())) >= b.cfg.PingAfter
}

// Text returns the text contents of res, joined by newlines.
func Text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Output is the jingwei output of a successful result: structuredContent
// (as the single text content that serializes it, when there is one), else the single text content as a JSON string, else {"content": [...]}.
func Output(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		// The serialized JSON the specification asks servers to send as
		// text beside it is exact (numbers, key order); the decoded
		// structuredContent is not.
		if len(res.Content) == 1 {
			if t, ok := res.Content[0].(*mcp.TextContent); ok && json.Valid([]byte(t.Text)) {
				return json.RawMessage(t.Text), nil
			}
		}
		return json.Marshal(res.StructuredContent)
	}
	if len(res.Content) == 1 {
		if t, ok := res.Content[0].(*mcp.TextContent); ok {
			return json.Marshal(t.Text)
		}
	}
	if len(res.Content) == 0 {
		return nil, nil
	}
	return json.Marshal(map[string]any{"content": res.Content})
}

// ToolInfo returns what the last tools/list said of the tool name, without
// connecting.
func (b *Backend) ToolInfo(name string) (*mcp.Tool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tools[name]
	return t, ok
}

// RequestFromMeta is the server side of Meta: the body request a tools/call
// of tool with args and _meta meta stands for. It fails when meta lacks the
// operation key or the fence (a call that did not come through jingwei).
func RequestFromMeta(meta mcp.Meta, tool string, args json.RawMessage) (worker.BodyRequest, error) {
	str := func(k string) string { s, _ := meta[k].(string); return s }
	raw, ok := meta[MetaFence]
	if !ok || str(MetaOperationKey) == "" {
		return worker.BodyRequest{}, errors.New("no io.jingwei/fence or io.jingwei/operation-key in _meta: call through jingwei")
	}
	b, _ := json.Marshal(raw)
	var f worker.Fence
	if err := json.Unmarshal(b, &f); err != nil {
		return worker.BodyRequest{}, fmt.Errorf("io.jingwei/fence: %w", err)
	}
	var ct struct{ Effect, Revision string }
	if b, err := json.Marshal(meta[MetaContract]); err == nil {
		_ = json.Unmarshal(b, &ct)
	}
	op := worker.Operation{Task: f.Task, Key: f.Key}
	if e, err := effect.Parse(ct.Effect); err == nil {
		op.Contract = effect.Contract{Effect: e, Revision: ct.Revision}
	}
	return worker.BodyRequest{
		Session: f.Session, CallID: f.CallID, Tool: tool, Arguments: args, Operation: op, Fence: f,
	}, nil
}
