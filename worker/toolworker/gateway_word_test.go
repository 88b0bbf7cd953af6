package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// standalone starts a server and a gateway of its own config (no tool
// worker).
func standalone(t *testing.T, cfg toolworker.GatewayConfig) (*stream.Topology, *nats.Conn, *toolworker.Gateway) {
	t.Helper()
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{})
	cfg.Topology = topo
	gw, err := toolworker.NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	return topo, nc, gw
}

// record appends a tool.call for request id with tool and arguments, and
// its tool.result with output, as a tool worker would; it returns the
// call's seq.
func (w *writer) record(t *testing.T, requestID, callID, tool, args, output string) uint64 {
	t.Helper()
	ctx := context.Background()
	seq, err := w.lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: callID, Tool: tool, Arguments: json.RawMessage(args), RequestID: requestID, StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-" + callID, Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "v1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.lg.Append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: callID, Status: schema.StatusOK, Output: json.RawMessage(output)}}); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestGatewayRequestConflict: a request id the log already binds to a call
// of another tool, task or arguments is answered request_conflict, never
// with that call's result; the same request (arguments written another
// way) is answered with it.
func TestGatewayRequestConflict(t *testing.T) {
	topo, _, gw := standalone(t, toolworker.GatewayConfig{CallTimeout: 2 * time.Second})
	const session = "s-conflict"
	w := newWriter(t, topo, session, "w1")
	// The attacker's request ran first under the victim's request id.
	w.record(t, "r-1", "c-attacker", "payments.charge", `{"to":"attacker","amount":5}`, `{"charged":"attacker"}`)
	ctx := context.Background()
	for name, q := range map[string]schema.Request{
		"arguments": {V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"to":"victim","amount":5}`)},
		"tool":      {V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "payments.refund", Arguments: json.RawMessage(`{"to":"attacker","amount":5}`)},
		"task":      {V: 1, RequestID: "r-1", Session: session, Task: "t-2", Tool: "payments.charge", Arguments: json.RawMessage(`{"to":"attacker","amount":5}`)},
	} {
		ev, err := gw.Call(ctx, q)
		if !errors.Is(err, schema.ErrRequestConflict) {
			t.Errorf("%s differ: %+v %v, want request_conflict", name, ev.Result, err)
		}
	}
	// The same request, its arguments spaced and ordered otherwise.
	ev, err := gw.Call(ctx, schema.Request{V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{ "amount": 5, "to": "attacker" }`)})
	if err != nil || ev.Result == nil || ev.Result.CallID != "c-attacker" {
		t.Fatalf("the same request: %+v %v, want its recorded result", ev, err)
	}
	// Arguments that differ only beyond float64's precision are other
	// arguments, as the tool worker's binding (stream.CallDigest) says:
	// the victim's 2^53 is not the attacker's 2^53+1.
	w.record(t, "r-2", "c-big", "payments.charge", `{"to":"attacker","amount":9007199254740993}`, `{"charged":"attacker"}`)
	ev, err = gw.Call(ctx, schema.Request{V: 1, RequestID: "r-2", Session: session, Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"to":"attacker","amount":9007199254740992}`)})
	if !errors.Is(err, schema.ErrRequestConflict) {
		t.Errorf("arguments that differ beyond float64: %+v %v, want request_conflict", ev.Result, err)
	}
}

// TestGatewayForgedWord: a word on the gateway's inbox (read off the
// request's header) that points at another request's call is checked
// against the log and ignored: the call still answers with its own
// result, or result_pending, never with the other one's.
func TestGatewayForgedWord(t *testing.T) {
	topo, nc, gw := standalone(t, toolworker.GatewayConfig{CallTimeout: time.Second})
	const session = "s-forged-word"
	w := newWriter(t, topo, session, "w1")
	other := w.record(t, "r-other", "c-other", "catalog.lookup", `{"sku":"B"}`, `{"price":99}`)
	sub, err := nc.Subscribe(topo.Names().RequestsSubject(session), func(m *nats.Msg) {
		inbox := m.Header.Get(toolworker.HeaderGatewayReply)
		if inbox == "" {
			t.Errorf("request without %s", toolworker.HeaderGatewayReply)
			return
		}
		for _, seq := range []uint64{other, other + 1, 1 << 40} {
			b, _ := json.Marshal(map[string]any{"session": session, "request_id": "r-1", "call_seq": seq})
			_ = nc.Publish(inbox, b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ev, err := gw.Call(context.Background(), schema.Request{V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"B"}`)})
	if !errors.Is(err, schema.ErrResultPending) {
		t.Fatalf("call with forged words only: %+v %v, want result_pending", ev.Result, err)
	}
}

// TestGatewayBusy: calls beyond the per-session or per-caller limit are
// answered busy at once, nothing published; other sessions and callers
// are not held by them, and a freed slot is taken again.
func TestGatewayBusy(t *testing.T) {
	type callerKey struct{}
	topo, _, gw := standalone(t, toolworker.GatewayConfig{CallTimeout: 3 * time.Second, MaxCallsPerSession: 2, MaxCallsPerCaller: 3,
		Caller: func(ctx context.Context) string { s, _ := ctx.Value(callerKey{}).(string); return s }})
	as := func(caller string) context.Context {
		return context.WithValue(context.Background(), callerKey{}, caller)
	}
	req := func(session, id string) schema.Request {
		return schema.Request{V: 1, RequestID: id, Session: session, Task: "t-1", Tool: "nobody.runs", Arguments: json.RawMessage(`{}`)}
	}
	var wg sync.WaitGroup
	pending := func(ctx context.Context, q schema.Request) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := gw.Call(ctx, q); !errors.Is(err, schema.ErrResultPending) {
				t.Errorf("pending call %s/%s: %v, want result_pending", q.Session, q.RequestID, err)
			}
		}()
	}
	pending(as("a"), req("s-1", "r-1"))
	pending(as("a"), req("s-1", "r-2"))
	streamtest.Eventually(t, 5*time.Second, "two calls published", func() bool { return waiting(t, topo) >= 2 })
	if _, err := gw.Call(as("b"), req("s-1", "r-3")); !errors.Is(err, schema.ErrBusy) {
		t.Fatalf("a third call of one session: %v, want busy", err)
	}
	pending(as("a"), req("s-2", "r-1"))
	streamtest.Eventually(t, 5*time.Second, "three calls published", func() bool { return waiting(t, topo) >= 3 })
	if _, err := gw.Call(as("a"), req("s-3", "r-1")); !errors.Is(err, schema.ErrBusy) {
		t.Fatalf("a fourth call of one caller: %v, want busy", err)
	}
	if waiting(t, topo) != 3 {
		t.Fatalf("%d requests published, want 3: a busy call published its request", waiting(t, topo))
	}
	// Another caller on another session is not held.
	pending(as("b"), req("s-3", "r-1"))
	wg.Wait()
	// Slots are free again.
	ctx, cancel := context.WithTimeout(as("a"), 100*time.Millisecond)
	defer cancel()
	if _, err := gw.Call(ctx, req("s-1", "r-9")); errors.Is(err, schema.ErrBusy) {
		t.Fatalf("after the calls ended: %v", err)
	}
}

// TestGatewayNotAnsweredWithAnotherRequestsRefusal: an agent's request
// refused (unknown_tool) under the victim's request id is on jw.answers
// when the victim calls through jw.api.call, and the victim's own call is
// recorded only later. The gateway must wait for the victim's result, not
// answer it with the attacker's refusal (the victim, told unknown_tool,
// would send its payment again under a new id while the first charged):
// an answer counts only under its request's digest.
func TestGatewayNotAnsweredWithAnotherRequestsRefusal(t *testing.T) {
	topo, _, gw := standalone(t, toolworker.GatewayConfig{CallTimeout: 10 * time.Second})
	const session = "s-victim"
	ctx := context.Background()
	victim := schema.Request{V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"B"}`)}
	attack := victim
	attack.Tool = "payments.nothing"
	if err := topo.Answers().PublishAnswer(ctx, schema.Answer{V: 1, Session: session, RequestID: "r-1", RequestDigest: stream.RequestDigestHex(attack),
		Code: schema.CodeUnknownTool, Message: "no tool payments.nothing"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		ev  schema.Event
		err error
	}
	got := make(chan answer, 1)
	go func() {
		ev, err := gw.Call(ctx, victim)
		got <- answer{ev, err}
	}()
	select {
	case a := <-got:
		t.Fatalf("HOLE: the victim answered before its call was recorded: %+v %v (the attacker's refusal)", a.ev.Result, a.err)
	case <-time.After(500 * time.Millisecond):
	}
	w := newWriter(t, topo, session, "w1")
	w.record(t, "r-1", "c-1", "catalog.lookup", `{"sku":"B"}`, `{"price":99}`)
	a := <-got
	if a.err != nil || a.ev.Result == nil || a.ev.Result.CallID != "c-1" || a.ev.Result.Status != schema.StatusOK {
		t.Fatalf("victim answered %+v %v, want its own call's ok", a.ev.Result, a.err)
	}
}
