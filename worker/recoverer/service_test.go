package recoverer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

func TestServiceEndpoints(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	e.run(e.recoverer("a"))
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
		streamtest.Eventually(t, 5*time.Second, "service answers", func() bool {
			m, err = e.nc.Request(e.topo.Names().APISubject(endpoint), b, 5*time.Second)
			return err != nats.ErrNoResponders
		})
		if err != nil {
			t.Fatalf("%s: %v", endpoint, err)
		}
		return m
	}
	errCode := func(m *nats.Msg) (string, schema.ErrorBody) {
		var body schema.ErrorBody
		_ = json.Unmarshal(m.Data, &body)
		return service.AnswerCode(m), body
	}

	// inspect
	m := req(service.EndpointInspect, service.Target{Session: "s-svc", CallID: "c-1"})
	var a schema.Assessment
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &a) != nil || a.Decision != schema.DecisionRetryAllowed || a.Evidence != "failed" {
		t.Fatalf("inspect: %s %s", code, m.Data)
	}
	// errors: unknown call, not confirmed, bad request
	errorsSent := 0
	for _, tc := range []struct {
		endpoint string
		body     any
		code     schema.Code
	}{
		{service.EndpointInspect, service.Target{Session: "s-svc", CallID: "nope"}, schema.CodeUnknownCall},
		{service.EndpointPrepare, service.Target{Session: "s-svc", CallID: "nope"}, schema.CodeUnknownCall},
		{service.EndpointPrepare, service.Target{Session: "s-svc", CallID: "c-open"}, schema.CodeNotConfirmed},
		{service.EndpointPrepare, "not an object", schema.CodeBadRequest},
		{service.EndpointPrepare, json.RawMessage(`{"session":"s-svc","session":"s-svc","call_id":"c-1"}`), schema.CodeBadRequest},
		{service.EndpointStatus, service.StatusRequest{Session: "bad.session"}, schema.CodeBadRequest},
	} {
		code, body := errCode(req(tc.endpoint, tc.body))
		errorsSent++
		if code != string(tc.code) || body.Error.Code != tc.code || body.Error.Message == "" {
			t.Errorf("%s %v: code %q body %+v, want %s", tc.endpoint, tc.body, code, body, tc.code)
		}
	}
	// prepare
	m = req(service.EndpointPrepare, service.Target{Session: "s-svc", CallID: "c-1"})
	var p schema.Plan
	if code, _ := errCode(m); code != "" || json.Unmarshal(m.Data, &p) != nil || p.Basis != schema.BasisUncertainSafe || p.Key != "k-1" {
		t.Fatalf("prepare: %s %s", code, m.Data)
	}
	// status
	m = req(service.EndpointStatus, service.StatusRequest{Session: "s-svc"})
	var st service.Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.OpenCalls) != 1 || st.OpenCalls[0].CallID != "c-open" || st.Plans.Issued != 1 || len(st.Plans.IssuedIDs) != 1 || st.Plans.IssuedIDs[0] != p.PlanID {
		t.Fatalf("status %s", m.Data)
	}
	// How long the call has been open: its tool.call's timestamp.
	if at := st.OpenCalls[0].At; at.IsZero() || time.Since(at) < 0 || time.Since(at) > time.Minute || !bytes.Contains(m.Data, []byte(`"at":"`)) {
		t.Fatalf("open call's at %v, want the tool.call's timestamp: %s", at, m.Data)
	}
	// The typed client reads the same answers, and error answers as
	// *schema.Error.
	cl := service.NewClient(e.nc, service.ClientConfig{Prefix: e.topo.Prefix})
	ctx := context.Background()
	if got, err := cl.Prepare(ctx, "s-svc", "c-1"); err != nil || got.PlanID != p.PlanID {
		t.Fatalf("client prepare: %+v %v", got, err)
	}
	if _, err := cl.Inspect(ctx, "s-svc", "nope"); !errors.Is(err, schema.ErrUnknownCall) {
		t.Fatalf("client inspect of an unknown call: %v", err)
	}
	errorsSent++

	// The service is discoverable ($SRV.INFO.jingwei): inspect, prepare,
	// status and history, each pointing at its schema files; jw.api.call is the
	// tool workers'.
	m, err := e.nc.Request("$SRV.INFO."+service.Name, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatalf("service info %s %v", m.Data, err)
	}
	names := map[string]bool{}
	for _, ep := range info.Endpoints {
		names[ep.Name] = true
		tenant := service.TenantScoped(ep.Name) && ep.Subject == e.topo.Names().APISubject(ep.Name)+".*" // jw.api.status.<tenant>
		if ep.Subject != e.topo.Names().APISubject(ep.Name) && !tenant || ep.Metadata[service.MetaRequestSchema] == "" || ep.Metadata[service.MetaResponseSchema] == "" || ep.Metadata[service.MetaErrorSchema] != "errorbody.schema.json" {
			t.Errorf("endpoint %+v", ep)
		}
	}
	if len(names) != 4 || !names[service.EndpointInspect] || !names[service.EndpointPrepare] || !names[service.EndpointStatus] || !names[service.EndpointHistory] {
		t.Fatalf("service info endpoints %v, want inspect, prepare, status, history", names)
	}

	// `nats micro stats` counts the error answers.
	m, err = e.nc.Request("$SRV.STATS."+service.Name, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	var nErr int
	for _, ep := range stats.Endpoints {
		nErr += service.Errors(ep)
	}
	if nErr != errorsSent {
		t.Fatalf("micro stats count %d errors, want %d", nErr, errorsSent)
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
			if _, err := e.topo.JS.PublishAsync(e.topo.Names().EventsSubject(s), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := e.writer("s-open", "w1")
	w.call("open-1", "t", effect.Idempotent, "k-1")
	w.call("open-2", "t", effect.Idempotent, "k-2")
	flush()
	// Wait for the end state, not for the count alone: beside a CPU hog
	// the count once reached 20,002 with the 2 open calls not yet tracked
	// (seen counts every delivery, a redelivered event too).
	streamtest.Eventually(t, 60*time.Second, "every event classified, the 2 open calls tracked", func() bool {
		st := r.Stats()
		return st.EventsSeen >= 2*calls+2 && st.OpenCalls == 2
	})
	if st := r.Stats(); st.OpenCalls != 2 {
		t.Fatalf("stats %+v: want exactly the 2 open calls tracked", st)
	}
	st, err := r.Status(ctx, "")
	if err != nil || len(st.OpenCalls) != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
}
