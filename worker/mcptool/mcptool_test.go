package mcptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/mcptool"
	"github.com/jingwei/jingwei/worker/mcptool/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.Main()
	os.Exit(m.Run())
}

// ledger starts an embedded server and a ledger on it; it returns the
// ledger and the server's URL.
func ledger(t *testing.T) (*mcptest.Ledger, string) {
	t.Helper()
	srv, nc, _ := streamtest.Start(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mcptest.NewLedger(t.Context(), js, "mcpledger")
	if err != nil {
		t.Fatal(err)
	}
	return l, srv.ClientURL()
}

// stdio is a backend running this test binary as a stdio MCP server.
func stdio(t *testing.T, natsURL string, hold time.Duration) *mcptool.Backend {
	t.Helper()
	b := mcptool.New(mcptool.Config{Name: "test", Command: os.Args[0], Env: map[string]string{
		mcptest.EnvServer: "stdio", mcptest.EnvNATS: natsURL, mcptest.EnvPrefix: "mcpledger", mcptest.EnvHold: hold.String(),
	}})
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// httpServer serves srv over streamable HTTP on a fresh loopback port.
func httpServer(t *testing.T, srv *mcptest.Server) (*httptest.Server, *mcptool.Backend) {
	t.Helper()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server }, nil))
	t.Cleanup(hs.Close)
	b := mcptool.New(mcptool.Config{Name: "http", URL: hs.URL, Headers: map[string]string{"X-Test": "1"}})
	t.Cleanup(func() { _ = b.Close() })
	return hs, b
}

func request(session, callID, key string, args string) worker.BodyRequest {
	return worker.BodyRequest{
		Session: session, CallID: callID, Tool: "t", Arguments: json.RawMessage(args),
		Operation: worker.Operation{Task: "task1", Key: key, Contract: effect.Contract{Effect: effect.Idempotent, Revision: "r"}},
		Fence:     worker.Fence{Session: session, Epoch: 1, CallID: callID, Task: "task1", Key: key},
	}
}

// The operation key and fence travel in _meta; a retry with another call
// id and the same key reaches the server with the same operation key, and
// the server's dedupe makes it one entry.
func TestPutCarriesOperationKeyAndDedupes(t *testing.T) {
	l, _ := ledger(t)
	srv := mcptest.NewServer(mcptest.Options{Ledger: l})
	_, b := httpServer(t, srv)
	ctx := t.Context()
	out1, err := b.Body("put")(ctx, request("s1", "c1", "k1", `{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	out2, err := b.Body("put")(ctx, request("s1", "c2", "k1", `{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	var r1, r2 map[string]any
	_ = json.Unmarshal(out1, &r1)
	_ = json.Unmarshal(out2, &r2)
	if r1["dup"] != false || r2["dup"] != true {
		t.Fatalf("first %s, retry %s: want dup false then true", out1, out2)
	}
	if n, err := l.Count(ctx, l.PutSubject("task1/k1")); err != nil || n != 1 {
		t.Fatalf("ledger holds %d entries (%v), want 1", n, err)
	}
	metas := srv.Metas()
	if len(metas) != 2 {
		t.Fatalf("%d calls", len(metas))
	}
	for i, m := range metas {
		if m[mcptool.MetaOperationKey] != "task1/k1" || m[mcptool.MetaSession] != "s1" || m[mcptool.MetaTask] != "task1" {
			t.Errorf("call %d _meta %v", i, m)
		}
		tok, op, err := mcptest.FenceFrom(m)
		if err != nil || op != "task1/k1" || tok.Epoch != 1 || tok.Session != "s1" || tok.Key != "k1" {
			t.Errorf("call %d fence %+v %q %v", i, tok, op, err)
		}
	}
	if metas[0][mcptool.MetaCallID] != "c1" || metas[1][mcptool.MetaCallID] != "c2" {
		t.Errorf("call ids %v %v", metas[0][mcptool.MetaCallID], metas[1][mcptool.MetaCallID])
	}
}

// isError: true is failed, never ok; not retryable.
func TestIsErrorIsFailed(t *testing.T) {
	_, b := httpServer(t, mcptest.NewServer(mcptest.Options{}))
	out, err := b.Body("fail")(t.Context(), request("s1", "c1", "k1", `{}`))
	if !errors.Is(err, mcptool.ErrToolError) || out != nil || !strings.Contains(err.Error(), "declined") {
		t.Fatalf("fail: %s, %v", out, err)
	}
}

// A hanging server: the body's context ends (the tool's timeout), the body
// returns the context's error (recorded as timeout) and the server sees
// notifications/cancelled.
func TestHangTimesOutAndCancels(t *testing.T) {
	srv := mcptest.NewServer(mcptest.Options{})
	_, b := httpServer(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := b.Body("hang")(ctx, request("s1", "c1", "k1", `{}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v, want the deadline", err)
	}
	streamtest.Eventually(t, 10*time.Second, "the server sees the cancellation", func() bool { return srv.Cancelled.Load() == 1 })
	// The session stays usable.
	if _, err := b.Body("noop")(t.Context(), request("s1", "c2", "k2", `{}`)); err != nil {
		t.Fatal(err)
	}
}

// A server whose annotations lie (read-only, idempotent) still charges on
// every call: the backend never reads the hints, and the host's contract
// is what counts. Tools reports the hints for display.
func TestLyingAnnotationsDecideNothing(t *testing.T) {
	l, _ := ledger(t)
	_, b := httpServer(t, mcptest.NewServer(mcptest.Options{Ledger: l}))
	tools, err := b.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if a := tools["liar"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Fatalf("liar's annotations %+v", a)
	}
	for i := range 2 {
		if _, err := b.Body("liar")(t.Context(), request("s1", "c"+string(rune('0'+i)), "k1", `{"amount":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := l.Count(t.Context(), l.ChargeSubject("s1")); n != 2 {
		t.Fatalf("ledger holds %d charges, want 2: the hints changed nothing", n)
	}
}

// A stdio server that exits in the middle of tools/call: no result, so
// the body fails without retryable (the runtime records failed, recovery
// sees an uncertain outcome) — never ok; the next call starts the server
// again (initialize, tools/list) and runs.
func TestStdioServerCrashMidCallThenRestarts(t *testing.T) {
	_, url := ledger(t)
	b := stdio(t, url, 0)
	out, err := b.Body("crash")(t.Context(), request("s1", "c1", "k1", `{}`))
	if err == nil || out != nil {
		t.Fatalf("crash: %s, %v: want an error", out, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connect") {
		t.Fatalf("crash: %v: want a lost answer", err)
	}
	if !strings.Contains(err.Error(), "no result") {
		t.Errorf("crash: %v", err)
	}
	var out2 json.RawMessage
	streamtest.Eventually(t, 20*time.Second, "the restarted server answers", func() bool {
		out2, err = b.Body("noop")(t.Context(), request("s1", "c2", "k2", `{}`))
		return err == nil
	})
	if string(out2) != `{"ok":true}` {
		t.Fatalf("noop after restart: %s", out2)
	}
}

// A stdio server's idempotent put, through a server process that writes
// to the JetStream ledger with the fence from _meta.
func TestStdioPutDedupes(t *testing.T) {
	l, url := ledger(t)
	b := stdio(t, url, 0)
	for i, call := range []string{"c1", "c2"} {
		out, err := b.Body("put")(t.Context(), request("s1", call, "k9", `{"amount":7}`))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if want := i == 1; !strings.Contains(string(out), `"dup":`+map[bool]string{true: "true", false: "false"}[want]) {
			t.Errorf("put %d: %s", i, out)
		}
	}
	if n, _ := l.Count(t.Context(), l.PutSubject("task1/k9")); n != 1 {
		t.Fatalf("ledger holds %d entries, want 1", n)
	}
}

// pingCounter counts the JSON-RPC pings and tools/calls an HTTP MCP
// handler receives.
type pingCounter struct {
	next         http.Handler
	pings, calls atomic.Int64
}

func (c *pingCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var msg struct{ Method string }
		_ = json.Unmarshal(b, &msg)
		switch msg.Method {
		case "ping":
			c.pings.Add(1)
		case "tools/call":
			c.calls.Add(1)
		}
	}
	c.next.ServeHTTP(w, r)
}

// A server that answered a moment ago is not pinged before the next
// tools/call (the busy path is one round trip per call); one quiet for
// PingAfter is, once, before the call.
func TestPingOnlyAfterAQuietSpell(t *testing.T) {
	srv := mcptest.NewServer(mcptest.Options{})
	pc := &pingCounter{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server }, nil)}
	hs := httptest.NewServer(pc)
	t.Cleanup(hs.Close)
	const quiet = 300 * time.Millisecond
	b := mcptool.New(mcptool.Config{Name: "http", URL: hs.URL, PingAfter: quiet})
	t.Cleanup(func() { _ = b.Close() })
	for i := range 20 {
		if _, err := b.Body("noop")(t.Context(), request("s1", fmt.Sprint("c", i), "k", `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if p, c := pc.pings.Load(), pc.calls.Load(); c != 20 || p != 0 {
		t.Fatalf("20 back-to-back calls: %d tools/call and %d pings, want 20 and 0", c, p)
	}
	time.Sleep(quiet + 50*time.Millisecond) // the server falls quiet
	if _, err := b.Body("noop")(t.Context(), request("s1", "c-late", "k", `{}`)); err != nil {
		t.Fatal(err)
	}
	if p, c := pc.pings.Load(), pc.calls.Load(); c != 21 || p != 1 {
		t.Fatalf("a call after a quiet spell: %d tools/call and %d pings in all, want 21 and 1", c, p)
	}
}

// A streamable-HTTP server that restarts between calls (forgetting its
// sessions): the backend makes a new session and the call runs.
func TestHTTPServerRestartsBetweenCalls(t *testing.T) {
	srv := mcptest.NewServer(mcptest.Options{})
	handler := func() http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.Server }, nil)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hs := &http.Server{Handler: handler()}
	go hs.Serve(ln)
	const quiet = 100 * time.Millisecond
	b := mcptool.New(mcptool.Config{Name: "http", URL: "http://" + addr, PingAfter: quiet})
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Body("noop")(t.Context(), request("s1", "c1", "k1", `{}`)); err != nil {
		t.Fatal(err)
	}
	_ = hs.Close()
	time.Sleep(quiet) // a restart while the server is quiet: the next call pings first
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s not free again: %v", addr, err)
	}
	hs2 := &http.Server{Handler: handler()}
	go hs2.Serve(ln2)
	t.Cleanup(func() { _ = hs2.Close() })
	out, err := b.Body("noop")(t.Context(), request("s1", "c2", "k2", `{}`))
	if err != nil || string(out) != `{"ok":true}` {
		t.Fatalf("after restart: %s, %v", out, err)
	}
	if n := srv.Calls("noop"); n != 2 {
		t.Fatalf("server saw %d noop calls, want 2", n)
	}
}

// Meta and RequestFromMeta are each other's inverse across the wire: a
// server rebuilds the body request (fence, operation, contract) a call
// stands for; a call without them is refused.
func TestRequestFromMetaRoundTrip(t *testing.T) {
	req := request("s1", "c1", "k1", `{"a":1}`)
	b, err := json.Marshal(mcptool.Meta(req))
	if err != nil {
		t.Fatal(err)
	}
	var meta mcp.Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	got, err := mcptool.RequestFromMeta(meta, "t", req.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	if got.Session != "s1" || got.CallID != "c1" || got.Fence != req.Fence || got.Operation != req.Operation || string(got.Arguments) != `{"a":1}` {
		t.Fatalf("got %+v, want %+v", got, req)
	}
	if _, err := mcptool.RequestFromMeta(mcp.Meta{}, "t", nil); err == nil {
		t.Fatal("a call without the fence was accepted")
	}
}

// The session outlives the body that made it: a second call, under another
// context, after the first's ended, uses the same server process.
func TestSessionOutlivesTheFirstCallsContext(t *testing.T) {
	_, url := ledger(t)
	b := stdio(t, url, 0)
	for i := range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		if _, err := b.Body("noop")(ctx, request("s1", "c"+string(rune('0'+i)), "k", `{}`)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	if n := b.Connects(); n != 1 {
		t.Fatalf("%d sessions made for 3 calls, want 1", n)
	}
}

// A server that exits in the middle of tools/call, through the runtime and
// the log: the call's result is failed and not retryable (nothing claims
// the server did not act), and recovery assesses it uncertain — a
// non_idempotent tool's call needs a review, never a retry of its own.
func TestCrashMidCallIsUncertainOnTheLog(t *testing.T) {
	_, _, topo := streamtest.Start(t)
	b := stdio(t, "", 0)
	reg, err := worker.NewRegistry(worker.Tool{Metadata: effect.Metadata{Name: "crash"}.WithEffect(effect.NonIdempotent, "crash-v1"), Body: b.Body("crash")})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().OpenLog(t.Context(), "s-crash", "test", 1)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: reg, Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Call(t.Context(), "crash", json.RawMessage(`{}`)) // err: the result is not ok
	if res.CallID == "" {
		t.Fatalf("no result recorded: %v", err)
	}
	if res.Status != schema.StatusFailed || res.Retryable {
		t.Fatalf("crash mid-call: status %s retryable %v (%s), want failed, not retryable", res.Status, res.Retryable, res.Error)
	}
	h, err := topo.Logs().Load(t.Context(), "s-crash")
	if err != nil {
		t.Fatal(err)
	}
	a, err := recovery.Inspect(schema.Events(h), res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionNeedsReview {
		t.Fatalf("assessment %+v, want uncertain, needs_review", a)
	}
}
