package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/catalog"
	"github.com/jingwei/jingwei/worker/mcpserver"
	"github.com/jingwei/jingwei/worker/mcptool/mcptest"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

type stack struct {
	backend *mcptest.Server
	ledger  *mcptest.Ledger
	url     string // jingwei mcp's endpoint
	direct  string // the backend's own endpoint
}

// start runs: a test MCP server (streamable HTTP) writing a JetStream
// ledger; a tool worker running its tools from a catalog; and jingwei as
// an MCP server in front of jw.api.call, with one bearer token.
func start(t *testing.T) *stack {
	t.Helper()
	_, nc, topo := streamtest.Start(t)
	js, _ := jetstream.New(nc)
	ledger, err := mcptest.NewLedger(t.Context(), js, "mcpledger")
	if err != nil {
		t.Fatal(err)
	}
	backend := mcptest.NewServer(mcptest.Options{Ledger: ledger})
	bs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return backend.Server }, nil))
	t.Cleanup(bs.Close)
	cat, err := catalog.Parse([]byte(`version: 1
servers:
  ledger: {url: "` + bs.URL + `"}
tools:
  - name: ledger.put
    mcp: {server: ledger, tool: put}
    contract: {effect: idempotent, revision: put-v1}
  - name: ledger.charge
    mcp: {server: ledger, tool: charge}
    contract: {effect: non_idempotent, revision: charge-v1}
  - name: ledger.liar
    mcp: {server: ledger, tool: liar}
    contract: {effect: non_idempotent, revision: liar-v1}
  - name: ledger.fail
    mcp: {server: ledger, tool: fail}
  - name: ledger.hang
    mcp: {server: ledger, tool: hang}
    timeout: 300ms
  - name: ledger.noop
    mcp: {server: ledger, tool: noop}
    contract: {effect: read_only, revision: noop-v1}
`))
	if err != nil {
		t.Fatal(err)
	}
	set := catalog.Open(cat, zerolog.Nop())
	t.Cleanup(set.Close)
	list, err := set.Tools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := toolworker.New(toolworker.Config{Topology: topo, Registry: reg, Owner: "tw-1", CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The tool worker serves jw.api.call on a connection of its own, a
	// moment after Run starts: wait until it answers (a bad body).
	streamtest.Eventually(t, 10*time.Second, "the tool worker's gateway answers", func() bool {
		_, err := nc.Request("jw.api.call", []byte("{}"), 5*time.Second)
		return !errors.Is(err, nats.ErrNoResponders)
	})
	caller := service.NewClient(nc, service.ClientConfig{Timeout: 30 * time.Second})
	hs := httptest.NewServer(mcpserver.HTTP(mcpserver.New(mcpserver.Config{Caller: caller, Tools: list, ProgressEvery: 50 * time.Millisecond}), mcpserver.Tokens{"tok-1": "agent-1"}))
	t.Cleanup(hs.Close)
	return &stack{backend: backend, ledger: ledger, url: hs.URL, direct: bs.URL}
}

// bearer adds a token to every request; drop, when set, makes the first
// tools/call's response get lost after the server answered it.
type bearer struct {
	token string
	drop  atomic.Bool
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := b.next.RoundTrip(r)
	if err == nil && bytes.Contains(body, []byte(`"tools/call"`)) && b.drop.CompareAndSwap(true, false) {
		_, _ = io.ReadAll(resp.Body) // the server ran the call and answered
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (test)")
	}
	return resp, err
}

func connect(t *testing.T, url string, rt *bearer) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// tools/list shows the host's contract, as annotations and in _meta: the
// liar's server says read-only, its host says non_idempotent, and
// non_idempotent is what the client sees.
func TestToolsListShowsTheHostContract(t *testing.T) {
	st := start(t)
	s := connect(t, st.url, &bearer{token: "tok-1", next: http.DefaultTransport})
	res, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	liar := byName["ledger.liar"]
	if liar == nil || liar.Annotations == nil || liar.Annotations.ReadOnlyHint || liar.Annotations.DestructiveHint == nil || !*liar.Annotations.DestructiveHint {
		t.Fatalf("liar listed as %+v", liar)
	}
	if c, _ := liar.Meta[mcpserver.MetaContract].(map[string]any); c["effect"] != "non_idempotent" || c["revision"] != "liar-v1" {
		t.Fatalf("liar's contract in _meta: %v", liar.Meta)
	}
	put := byName["ledger.put"]
	if put == nil || !put.Annotations.IdempotentHint {
		t.Fatalf("put listed as %+v", put)
	}
	if fail := byName["ledger.fail"]; fail.Meta[mcpserver.MetaContract].(map[string]any)["effect"] != "unknown" || fail.Annotations.IdempotentHint || fail.Annotations.ReadOnlyHint {
		t.Fatalf("fail (no contract) listed as %+v", fail)
	}
	// The server's inputSchema is passed on.
	if b, _ := json.Marshal(put.InputSchema); !strings.Contains(string(b), "amount") {
		t.Fatalf("put's input schema %s", b)
	}
}

// A client whose connection drops after it sent tools/call re-sends it
// (same _meta request id) on a new connection: it gets the stored result,
// the tool ran once, the ledger holds one entry.
func TestResendAfterLostResponseRunsOnce(t *testing.T) {
	st := start(t)
	rt := &bearer{token: "tok-1", next: http.DefaultTransport}
	rt.drop.Store(true)
	params := &mcp.CallToolParams{Name: "ledger.charge", Arguments: map[string]any{"amount": 42},
		Meta: mcp.Meta{mcpserver.MetaRequestID: "intent-1", mcpserver.MetaSession: "agent-1-s"}}
	s1 := connect(t, st.url, rt)
	if res, err := s1.CallTool(t.Context(), params); err == nil {
		t.Fatalf("the first response should be lost, got %+v", res)
	}
	s2 := connect(t, st.url, rt)
	res, err := s2.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("re-send: %s", text(res))
	}
	if m, _ := res.StructuredContent.(map[string]any); m["charged"] != float64(42) {
		t.Fatalf("re-send's structured content %v (%s)", res.StructuredContent, text(res))
	}
	if n := st.backend.Calls("charge"); n != 1 {
		t.Fatalf("the server ran charge %d times, want 1", n)
	}
	if n, _ := st.ledger.Count(t.Context(), st.ledger.ChargeSubject("agent-1-s")); n != 1 {
		t.Fatalf("ledger holds %d charges, want 1", n)
	}
	if res.Meta[mcpserver.MetaCallID] == "" || res.Meta[mcpserver.MetaSession] != "agent-1-s" {
		t.Fatalf("result _meta %v", res.Meta)
	}
}

// Not ok is never a success: a tool error (isError), a timeout and an
// unknown tool are tool errors whose text starts with the jingwei code.
func TestNotOKIsAToolErrorWithItsCode(t *testing.T) {
	st := start(t)
	s := connect(t, st.url, &bearer{token: "tok-1", next: http.DefaultTransport})
	for _, tc := range []struct{ tool, code string }{
		{"ledger.fail", "failed"},
		{"ledger.hang", "timeout"},
	} {
		res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.HasPrefix(text(res), "jingwei "+tc.code+":") || res.Meta[mcpserver.MetaCode] != tc.code {
			t.Fatalf("%s: isError %v, %q, _meta %v", tc.tool, res.IsError, text(res), res.Meta)
		}
	}
	// Arguments the server's schema refuses are rejected before anything runs.
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "ledger.put", Arguments: map[string]any{"amount": "many"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta[mcpserver.MetaCode] != "rejected" || !strings.Contains(text(res), "nothing happened") {
		t.Fatalf("bad arguments: %q %v", text(res), res.Meta)
	}
	if st.backend.Calls("put") != 0 {
		t.Fatal("put ran with refused arguments")
	}
}

// Without a known bearer token nothing is served.
func TestBearerTokenRequired(t *testing.T) {
	st := start(t)
	for _, tok := range []string{"", "tok-2"} {
		c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		_, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url, HTTPClient: &http.Client{Transport: &bearer{token: tok, next: http.DefaultTransport}}, MaxRetries: -1}, nil)
		if err == nil {
			t.Fatalf("token %q: connected", tok)
		}
	}
	resp, err := http.Post(st.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s", resp.Status)
	}
}

// A client that gave a progress token hears notifications/progress while
// its call waits for the result.
func TestProgressWhileWaiting(t *testing.T) {
	st := start(t)
	var got atomic.Int64
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params.ProgressToken == "p-1" && strings.Contains(r.Params.Message, "waiting") {
				got.Add(1)
			}
		},
	})
	s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url, HTTPClient: &http.Client{Transport: &bearer{token: "tok-1", next: http.DefaultTransport}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := &mcp.CallToolParams{Name: "ledger.hang", Arguments: map[string]any{}}
	p.SetProgressToken("p-1")
	res, err := s.CallTool(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta[mcpserver.MetaCode] != "timeout" {
		t.Fatalf("hang: %q %v", text(res), res.Meta)
	}
	streamtest.Eventually(t, 10*time.Second, "progress notifications", func() bool { return got.Load() > 0 })
}

// A client that re-sends the same JSON-RPC request (same session, same
// id) without a request id of its own: the request id derived from the
// MCP session and the JSON-RPC id makes it one call, answered twice.
func TestSameJSONRPCRequestTwiceRunsOnce(t *testing.T) {
	st := start(t)
	post := func(session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, st.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-1")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ledger.charge","arguments":{"amount":3}}}`
	callID := regexp.MustCompile(`"io.jingwei/call-id":"([^"]+)"`)
	_, first := post(sid, call)
	_, second := post(sid, call)
	m1, m2 := callID.FindStringSubmatch(first), callID.FindStringSubmatch(second)
	if m1 == nil || m2 == nil || m1[1] != m2[1] {
		t.Fatalf("answers name calls %v and %v:\n%s\n%s", m1, m2, first, second)
	}
	if n := st.backend.Calls("charge"); n != 1 {
		t.Fatalf("charge ran %d times, want 1", n)
	}
}
