package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// gatewaySetup starts a server and a gateway alone (no tool worker: the
// tests stand in for one) with the given call timeout.
func gatewaySetup(t *testing.T, callTimeout time.Duration) (*stream.Topology, *nats.Conn) {
	t.Helper()
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{})
	gw, err := toolworker.NewGateway(toolworker.GatewayConfig{Topology: topo, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := gw.Serve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(); cancel() })
	return topo, nc
}

// writer appends to a session log as a stand-in tool worker would.
type writer struct{ lg *stream.Log }

func newWriter(t *testing.T, topo *stream.Topology, session, owner string) *writer {
	t.Helper()
	ctx := context.Background()
	l, err := topo.Leases().AcquireLease(ctx, session, owner)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().OpenLog(ctx, session, owner, l.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	return &writer{lg: lg}
}

// TestGatewayCall: jw.api.call answers with the stored tool.result of its
// request, answers a request id already in the log from the log without
// publishing it again, refuses a malformed request (invalid_request) and
// says result_pending when no result comes in time; micro counts the error
// answers, and the endpoint points at its schema files.
func TestGatewayCall(t *testing.T) {
	topo, nc := gatewaySetup(t, time.Second)
	const session = "s-svc"
	w := newWriter(t, topo, session, "w1")
	cl := service.NewClient(nc, service.ClientConfig{Prefix: topo.Prefix, Timeout: 10 * time.Second})
	ctx := context.Background()
	var published atomic.Int32
	// A stand-in tool worker answers requests on the log.
	sub, err := nc.Subscribe(topo.Names().RequestsSubject(session), func(msg *nats.Msg) {
		var q schema.Request
		if err := json.Unmarshal(msg.Data, &q); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		published.Add(1)
		if q.Tool == "slow.tool" {
			return // never answered
		}
		id := "call-" + q.RequestID
		_, err1 := w.lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: q.Tool, Arguments: q.Arguments, RequestID: q.RequestID, StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "k-" + q.RequestID, Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "v1"}}}})
		_, err2 := w.lg.Append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK, Output: json.RawMessage(`{"price":3}`)}})
		if err1 != nil || err2 != nil {
			t.Errorf("stand-in worker: %v %v", err1, err2)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	q := schema.Request{V: 1, RequestID: "r-1", Session: session, Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A"}`)}
	ev, err := cl.Call(ctx, q)
	if err != nil || ev.Type != schema.TypeResult || ev.Result.CallID != "call-r-1" || string(ev.Result.Output) != `{"price":3}` {
		t.Fatalf("call: %+v %v", ev, err)
	}
	// The same request id again: answered from the log, not run again.
	_ = sub.Unsubscribe()
	if ev, err := cl.Call(ctx, q); err != nil || ev.Result == nil || ev.Result.CallID != "call-r-1" {
		t.Fatalf("call again: %+v %v", ev, err)
	}
	// Malformed: refused before anything is published.
	if _, err := cl.Call(ctx, schema.Request{Session: session, Tool: "x"}); schema.CodeOf(err) != schema.CodeInvalidRequest {
		t.Fatalf("malformed call: %v, want invalid_request", err)
	}
	// Nobody runs it: result_pending, not a result's timeout.
	_, err = cl.Call(ctx, schema.Request{V: 1, RequestID: "r-2", Session: session, Task: "t-1", Tool: "slow.tool", Arguments: json.RawMessage(`{}`)})
	if !errors.Is(err, schema.ErrResultPending) || errors.Is(err, schema.ErrTimeout) {
		t.Fatalf("call without a worker: %v, want result_pending", err)
	}
	if published.Load() != 1 {
		t.Errorf("the stand-in worker saw %d requests, want 1", published.Load())
	}

	// `nats micro info` shows the gateway with its schema files, and
	// `nats micro stats` counts the two error answers (result_pending, sent
	// after the call timeout, in the endpoint data: service.Errors).
	m, err := nc.Request("$SRV.INFO."+service.GatewayName, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil || len(info.Endpoints) == 0 {
		t.Fatalf("info %s %v", m.Data, err)
	}
	for _, ep := range info.Endpoints {
		if ep.Name != service.EndpointCall || ep.Subject != topo.Names().APISubject(service.EndpointCall) && ep.Subject != topo.Names().APISubject(service.EndpointCall)+".*" || ep.Metadata[service.MetaRequestSchema] != "request.schema.json" {
			t.Fatalf("endpoint %+v", ep)
		}
	}
	m, err = nc.Request("$SRV.STATS."+service.GatewayName, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	var nReq, nErr int
	for _, ep := range stats.Endpoints {
		nReq, nErr = nReq+ep.NumRequests, nErr+service.Errors(ep)
	}
	if nReq != 4 || nErr != 2 {
		t.Fatalf("micro stats: %d requests, %d errors; want 4 and 2", nReq, nErr)
	}
}

// TestCallAnswersOnlyFromTheStoredLog: jw.api.call never hands the caller a
// message JetStream refused to store. An attacker floods the session's
// subject with a forged tool.call and tool.result ok for the caller's
// request id, each carrying an expected-sequence header that makes
// JetStream refuse it (a core subscriber would still see every one): with
// no tool worker the call answers result_pending, and with one the caller gets the real
// result, not the forged output.
func TestCallAnswersOnlyFromTheStoredLog(t *testing.T) {
	topo, nc := gatewaySetup(t, 2*time.Second)
	const session = "s-forge"
	forge := func(stop <-chan struct{}, requestID string) {
		callEv := schema.Event{V: 1, Session: session, Epoch: 1, At: time.Now().UTC(), Type: schema.TypeCall, Call: &schema.Call{
			CallID: "c-forged", Tool: "catalog.lookup", Arguments: json.RawMessage(`{}`), RequestID: requestID, StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "k-f", Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "v1"}}}}
		resEv := schema.Event{V: 1, Session: session, Epoch: 1, At: time.Now().UTC(), Type: schema.TypeResult, Result: &schema.Result{
			CallID: "c-forged", Status: schema.StatusOK, Output: json.RawMessage(`{"forged":true}`)}}
		for {
			for _, ev := range []schema.Event{callEv, resEv} {
				b, _ := schema.EncodeEvent(ev)
				m := nats.NewMsg(topo.Names().EventsSubject(session))
				m.Data = b
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999999") // JetStream refuses to store it
				_ = nc.PublishMsg(m)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	call := func(requestID string) (*nats.Msg, error) {
		b, _ := json.Marshal(schema.Request{V: 1, RequestID: requestID, Session: session, Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A"}`)})
		var m *nats.Msg
		var err error
		streamtest.Eventually(t, 5*time.Second, "service answers", func() bool {
			m, err = nc.Request(topo.Names().APISubject(service.EndpointCall), b, 10*time.Second)
			return err != nats.ErrNoResponders
		})
		return m, err
	}

	stop := make(chan struct{})
	go forge(stop, "r-1")
	m, err := call("r-1")
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	if code := service.AnswerCode(m); code != string(schema.CodeResultPending) {
		t.Fatalf("call with only forged, refused events on the wire: code %q, answer %s; want result_pending", code, m.Data)
	}
	if h, err := topo.Logs().Load(context.Background(), session); err != nil || len(h) != 0 {
		t.Fatalf("the forged events were stored: %d events, %v", len(h), err)
	}

	// A stand-in tool worker answers on the log; the forgeries go on.
	w := newWriter(t, topo, session, "w1")
	sub, err := nc.Subscribe(topo.Names().RequestsSubject(session), func(msg *nats.Msg) {
		var q schema.Request
		if json.Unmarshal(msg.Data, &q) != nil || q.RequestID != "r-2" {
			return
		}
		go func() {
			time.Sleep(300 * time.Millisecond) // let forgeries go by first
			ctx := context.Background()
			_, err1 := w.lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-real", Tool: q.Tool, Arguments: q.Arguments, RequestID: q.RequestID, StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: "k-real", Contract: effect.Contract{Effect: effect.ReadOnly, Revision: "v1"}}}})
			_, err2 := w.lg.Append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-real", Status: schema.StatusOK, Output: json.RawMessage(`{"price":3}`)}})
			if err1 != nil || err2 != nil {
				t.Errorf("stand-in worker: %v %v", err1, err2)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	stop = make(chan struct{})
	go forge(stop, "r-2")
	m, err = call("r-2")
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	var ev schema.Event
	if code := service.AnswerCode(m); code != "" || json.Unmarshal(m.Data, &ev) != nil || ev.Result == nil || ev.Result.CallID != "c-real" || string(ev.Result.Output) != `{"price":3}` {
		t.Fatalf("call: %s, want the stored result of c-real", m.Data)
	}
}
