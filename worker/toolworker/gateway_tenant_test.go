package toolworker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestGatewayTenantScoped: a request on jw.api.call.<tenant> (what a
// tenant's agent reaches through its account's import) for a session of
// another tenant, or of no tenant, is refused with forbidden and nothing
// is published: no request id can be claimed ahead, and no answer
// fabricated, in another tenant's session. The tenant's own session is
// called as usual.
func TestGatewayTenantScoped(t *testing.T) {
	topo, nc := gatewaySetup(t, 2*time.Second)
	ctx := context.Background()
	req := func(subject string, q schema.Request) *nats.Msg {
		t.Helper()
		b, _ := json.Marshal(q)
		var m *nats.Msg
		var err error
		streamtest.Eventually(t, 5*time.Second, "gateway answers", func() bool {
			m, err = nc.Request(subject, b, 10*time.Second)
			return err != nats.ErrNoResponders
		})
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return m
	}
	victim := schema.Request{V: 1, RequestID: "r-1", Session: "beta-1", Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"amount":1}`)}
	for _, s := range []string{"beta-1", "s-1", "acme_x-1"} {
		q := victim
		q.Session = s
		if m := req("jw.api.call.acme", q); service.AnswerCode(m) != string(schema.CodeForbidden) {
			t.Errorf("ATTACK: tenant acme called in %s: %s %s", s, service.AnswerCode(m), m.Data)
		}
	}
	st, err := topo.JS.Stream(ctx, topo.Names().StreamName("REQUESTS"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("jw.requests.>"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("ATTACK: %d requests published for a tenant's foreign calls", info.State.Msgs)
	}
	// Its own session: published (no tool worker here: result_pending).
	own := victim
	own.Session = "acme-1"
	if m := req("jw.api.call.acme", own); service.AnswerCode(m) != string(schema.CodeResultPending) {
		t.Fatalf("tenant acme, own session: %s %s", service.AnswerCode(m), m.Data)
	}
	if info, err = st.Info(ctx, jetstream.WithSubjectFilter("jw.requests.acme-1")); err != nil || info.State.Msgs != 1 {
		t.Fatalf("acme-1's request not published: %v %+v", err, info)
	}
	// The operators' jw.api.call is not scoped.
	if m := req("jw.api.call", victim); service.AnswerCode(m) != string(schema.CodeResultPending) {
		t.Fatalf("operator call: %s %s", service.AnswerCode(m), m.Data)
	}
}

// TestGatewayBusyPerTenant: the gateway's per-caller limit is keyed by the
// tenant the server named (service.Caller): tenant acme, at its limit,
// is answered busy without anything published, while tenant beta's call
// is taken — one tenant's flood does not hold another's calls.
func TestGatewayBusyPerTenant(t *testing.T) {
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{})
	gw, err := toolworker.NewGateway(toolworker.GatewayConfig{Topology: topo, CallTimeout: 3 * time.Second, MaxCallsPerCaller: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := gw.Serve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(); cancel(); gw.Close() })
	call := func(subject, session, id string) *nats.Msg {
		b, _ := json.Marshal(schema.Request{V: 1, RequestID: id, Session: session, Task: "t-1", Tool: "nobody.runs", Arguments: json.RawMessage(`{}`)})
		m, err := nc.Request(subject, b, 10*time.Second)
		if err != nil {
			t.Errorf("%s %s: %v", subject, session, err)
			return nil
		}
		return m
	}
	held := make(chan *nats.Msg, 1)
	go func() { held <- call("jw.api.call.acme", "acme-1", "r-1") }() // pending: no tool worker
	streamtest.Eventually(t, 5*time.Second, "acme's first call is published", func() bool {
		st, err := topo.JS.Stream(ctx, topo.Names().StreamName("REQUESTS"))
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	if m := call("jw.api.call.acme", "acme-2", "r-2"); m == nil || service.AnswerCode(m) != string(schema.CodeBusy) {
		t.Fatalf("acme's second call at its limit: %v, want busy", m)
	}
	if m := call("jw.api.call.beta", "beta-1", "r-1"); m == nil || service.AnswerCode(m) != string(schema.CodeResultPending) {
		t.Fatalf("beta's call while acme is at its limit: %v, want taken (result_pending: no tool worker)", m)
	}
	<-held
}
