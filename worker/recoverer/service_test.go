package recoverer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

func TestServiceEndpoints(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	e.run(e.recoverer("a", func(c *Config) { c.CallTimeout = 3 * time.Second }))
	w := e.writer("s-svc", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusFailed, "")
	w.call("c-open", "orders.create", effect.Idempotent, "k-2")
	as.wait(t, "s-svc", "c-1", 5*time.Second)

	req := func(endpoint string, body any) *nats.Msg {
		t.Helper()
		b, _ := json.Marshal(body)
		var m *nats.Msg
		var err error
		// The service registers when Run starts: retry "no responders".
		eventually(t, 5*time.Second, "service answers", func() bool {
			m, err = e.nc.Request(e.topo.APISubject(endpoint), b, 5*time.Second)
			return err != nats.ErrNoResponders
		})
		if err != nil {
			t.Fatalf("%s: %v", endpoint, err)
		}
		return m
	}
	errCode := func(m *nats.Msg) (string, ErrorBody) {
		var body ErrorBody
		_ = json.Unmarshal(m.Data, &body)
		return m.Header.Get(micro.ErrorCodeHeader), body
	}

	// inspect
	m := req(EndpointInspect, Target{Session: "s-svc", CallID: "c-1"})
	var a schema.Assessment
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &a) != nil || a.Decision != schema.DecisionRetryAllowed || a.Evidence != "failed" {
		t.Fatalf("inspect: %s %s", code, m.Data)
	}
	// errors: unknown call, not confirmed, bad request
	for _, tc := range []struct {
		endpoint string
		body     any
		code     schema.Code
	}{
		{EndpointInspect, Target{Session: "s-svc", CallID: "nope"}, schema.CodeUnknownCall},
		{EndpointPrepare, Target{Session: "s-svc", CallID: "nope"}, schema.CodeUnknownCall},
		{EndpointPrepare, Target{Session: "s-svc", CallID: "c-open"}, schema.CodeNotConfirmed},
		{EndpointPrepare, "not an object", schema.CodeBadRequest},
		{EndpointStatus, StatusRequest{Session: "bad.session"}, schema.CodeBadRequest},
		{EndpointCall, schema.Request{Session: "s-svc", Tool: "x"}, schema.CodeInvalidRequest},
	} {
		code, body := errCode(req(tc.endpoint, tc.body))
		if code != string(tc.code) || body.Error.Code != string(tc.code) || body.Error.Message == "" {
			t.Errorf("%s %v: code %q body %+v, want %s", tc.endpoint, tc.body, code, body, tc.code)
		}
	}
	// prepare
	m = req(EndpointPrepare, Target{Session: "s-svc", CallID: "c-1"})
	var p schema.Plan
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &p) != nil || p.Basis != schema.BasisUncertainSafe || p.Key != "k-1" {
		t.Fatalf("prepare: %s %s", code, m.Data)
	}
	// status
	m = req(EndpointStatus, StatusRequest{Session: "s-svc"})
	var st Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.OpenCalls) != 1 || st.OpenCalls[0].CallID != "c-open" || st.Plans.Issued != 1 || len(st.Plans.IssuedIDs) != 1 || st.Plans.IssuedIDs[0] != p.PlanID {
		t.Fatalf("status %s", m.Data)
	}

	// call: a stand-in tool worker answers requests on the log.
	sub, err := e.nc.Subscribe(e.topo.RequestsSubject("s-svc"), func(msg *nats.Msg) {
		var q schema.Request
		if err := json.Unmarshal(msg.Data, &q); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		if q.Tool == "slow.tool" {
			return // never answered: the call times out
		}
		ctx := context.Background()
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
	m = req(EndpointCall, schema.Request{V: 1, RequestID: "r-1", Session: "s-svc", Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A"}`)})
	var ev schema.Event
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &ev) != nil || ev.Type != schema.TypeResult || ev.Result.CallID != "call-r-1" || string(ev.Result.Output) != `{"price":3}` {
		t.Fatalf("call: %s %s", code, m.Data)
	}
	// The same request id again: answered from the log, not run again.
	_ = sub.Unsubscribe()
	m = req(EndpointCall, schema.Request{V: 1, RequestID: "r-1", Session: "s-svc", Task: "t-1", Tool: "catalog.lookup", Arguments: json.RawMessage(`{"sku":"A"}`)})
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &ev) != nil || ev.Result == nil || ev.Result.CallID != "call-r-1" {
		t.Fatalf("call again: %s %s", code, m.Data)
	}
	// Nobody runs it: timeout.
	if code, _ := errCode(req(EndpointCall, schema.Request{V: 1, RequestID: "r-2", Session: "s-svc", Task: "t-1", Tool: "slow.tool", Arguments: json.RawMessage(`{}`)})); code != string(schema.CodeResultPending) {
		t.Fatalf("call without a worker: code %q, want timeout", code)
	}

	// The service is discoverable ($SRV.INFO.jingwei).
	m, err = e.nc.Request("$SRV.INFO."+ServiceName, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil || len(info.Endpoints) != 4 {
		t.Fatalf("service info %s %v", m.Data, err)
	}
}

// TestMemoryFollowsOpenCalls: 10,000 finished calls leave nothing tracked;
// open calls are what is tracked.
func TestMemoryFollowsOpenCalls(t *testing.T) {
	e := setup(t, 0)
	r := e.recoverer("a", func(c *Config) { c.DisableService = true })
	e.run(r)
	ctx := context.Background()
	const calls = 10_000
	flush := func() {
		select {
		case <-e.topo.JS.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			t.Fatal("publish did not complete")
		}
	}
	for i := range calls {
		if i%250 == 0 {
			flush()
		}
		s := fmt.Sprintf("s-%d", i%16)
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: fmt.Sprintf("c-%d", i), Tool: "t", Arguments: json.RawMessage(`{}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t", Key: fmt.Sprintf("k-%d", i), Contract: effect.Contract{Effect: effect.Idempotent, Revision: "v"}}}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: fmt.Sprintf("c-%d", i), Status: schema.StatusOK}},
		} {
			ev.V, ev.Session, ev.Epoch, ev.At = 1, s, 1, time.Now().UTC()
			b, _ := json.Marshal(ev)
			if _, err := e.topo.JS.PublishAsync(e.topo.EventsSubject(s), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := e.writer("s-open", "w1")
	w.call("open-1", "t", effect.Idempotent, "k-1")
	w.call("open-2", "t", effect.Idempotent, "k-2")
	flush()
	eventually(t, 60*time.Second, "every event classified", func() bool {
		return r.Stats().EventsSeen >= 2*calls+2
	})
	if st := r.Stats(); st.OpenCalls != 2 {
		t.Fatalf("stats %+v: want exactly the 2 open calls tracked", st)
	}
	st, err := r.Status(ctx, "")
	if err != nil || len(st.OpenCalls) != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// TestCallAnswersOnlyFromTheStoredLog: jw.api.call never hands the caller a
// message JetStream refused to store. An attacker floods the session's
// subject with a forged tool.call and tool.result ok for the caller's
// request id, each carrying an expected-sequence header that makes
// JetStream refuse it (a core subscriber would still see every one): with
// no tool worker the call times out, and with one the caller gets the real
// result, not the forged output.
func TestCallAnswersOnlyFromTheStoredLog(t *testing.T) {
	e := setup(t, 0)
	e.run(e.recoverer("a", func(c *Config) { c.CallTimeout = 2 * time.Second }))
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
				m := nats.NewMsg(e.topo.EventsSubject(session))
				m.Data = b
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999999") // JetStream refuses to store it
				_ = e.nc.PublishMsg(m)
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
		eventually(t, 5*time.Second, "service answers", func() bool {
			m, err = e.nc.Request(e.topo.APISubject(EndpointCall), b, 10*time.Second)
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
	if code := m.Header.Get(micro.ErrorCodeHeader); code != string(schema.CodeResultPending) {
		t.Fatalf("call with only forged, refused events on the wire: code %q, answer %s; want timeout", code, m.Data)
	}
	if h, err := e.topo.Load(context.Background(), session); err != nil || len(h) != 0 {
		t.Fatalf("the forged events were stored: %d events, %v", len(h), err)
	}

	// A stand-in tool worker answers on the log; the forgeries go on.
	w := e.writer(session, "w1")
	sub, err := e.nc.Subscribe(e.topo.RequestsSubject(session), func(msg *nats.Msg) {
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
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" || json.Unmarshal(m.Data, &ev) != nil || ev.Result == nil || ev.Result.CallID != "c-real" || string(ev.Result.Output) != `{"price":3}` {
		t.Fatalf("call: %s, want the stored result of c-real", m.Data)
	}
}
