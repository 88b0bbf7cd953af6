package access_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// proberClient is a plain NATS client with the prober role's nkey seed,
// collecting the permission violations the server reports.
func proberClient(t *testing.T, rs *roleServer) (*nats.Conn, *violations) {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(rs.dir.SeedFile(access.RoleProber))
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	nc, err := nats.Connect(rs.srv.ClientURL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	v.watch(nc)
	return nc, v
}

// TestProberRoleRefusedWhatItDoesNotNeed: with the prober role's key, a
// plain NATS client cannot call a tool (jw.api.call), append to a session
// log, publish a plan or an assessment, approve a waiting call, stop a
// task, write a lease, read the order keys, or manage a stream: the server
// refuses each, and nothing is stored.
func TestProberRoleRefusedWhatItDoesNotNeed(t *testing.T) {
	rs := startRoleServer(t)
	nc, v := proberClient(t, rs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)

	if _, err := nc.Request("jw.api.call", []byte(`{"session":"s-1","tool":"payments.charge","arguments":{}}`), 500*time.Millisecond); err == nil {
		t.Error("jw.api.call answered the prober")
	}
	v.await(t, "jw.api.call")
	for _, subj := range []string{"jw.events.s-1", "jw.plans.s-1", "jw.assessments.s-1", "jw.approvals.s-1", "jw.approvals.s-1.stop", "jw.answers.s-1", "$KV.jw_leases.s-1", "tools.ledger"} {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := js.Publish(pctx, subj, []byte(`{"v":1}`))
		pcancel()
		if err == nil {
			t.Errorf("publish %s: stored", subj)
		}
		v.await(t, subj)
	}
	for _, req := range []string{"$JS.API.DIRECT.GET.KV_tools_order_keys.$KV.tools_order_keys.k", "$JS.API.DIRECT.GET.KV_jw_leases.$KV.jw_leases.s-1", "$JS.API.STREAM.PURGE.JW_REVIEWS", "$JS.API.STREAM.CREATE.JW_OTHER", "$JS.API.CONSUMER.CREATE.JW_EVENTS.c.jw.events.s-1"} {
		_, _ = nc.Request(req, nil, 300*time.Millisecond)
		v.await(t, req)
	}
	// Nothing reached the streams.
	for _, c := range []struct{ stream, subj string }{{"JW_EVENTS", "jw.events.s-1"}, {"JW_PLANS", "jw.plans.s-1"}, {"JW_APPROVALS", "jw.approvals.s-1"}, {"JW_ASSESSMENTS", "jw.assessments.s-1"}} {
		s, err := jetstream.New(rs.admin)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetLastMsgForSubject(ctx, c.subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s holds a message on %s: %v", c.stream, c.subj, err)
		}
	}
	// It does not receive the service's requests either.
	if _, err := nc.SubscribeSync("jw.api.status"); err != nil {
		t.Fatal(err)
	}
	v.await(t, "jw.api.status")
}

// TestProberRoleDoesWhatTheProbesNeed: with the prober role's key alone,
// the example tools' probes run as the prober runs them: it opens the
// topology, reads a session's log, creates the tools' stream and buckets
// (nobody made them yet), raises the ledger's and an order's fences (a
// tool worker's late charge at the old epoch is then refused), reads the
// ledger and the orders, publishes a review (PubAck) and keeps a durable
// consumer on the assessments (Prober.Run).
func TestProberRoleDoesWhatTheProbesNeed(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, v := proberClient(t, rs)
	js, _ := jetstream.New(nc)
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
	if err != nil {
		t.Fatalf("prober: open topology: %v", err)
	}
	// A worker's session: fenced at epoch 1, one call.
	_, wtopo := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	lease, err := wtopo.Leases().AcquireLease(ctx, "s-1", "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	log, _, err := wtopo.Logs().FenceLoad(ctx, "s-1", "worker-1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: tools.PaymentsCharge, Arguments: []byte(`{"account":"a","amount_cents":5}`)}}); err != nil {
		t.Fatal(err)
	}
	if h, err := topo.Logs().Load(ctx, "s-1"); err != nil || len(h) != 2 {
		t.Fatalf("prober: Load: %d events, %v", len(h), err)
	}

	ptl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		t.Fatalf("prober: the tools' stream and buckets: %v", err)
	}
	req := worker.BodyRequest{Session: "s-1", CallID: "c-1", Arguments: []byte(`{"account":"a","amount_cents":5}`),
		Operation: worker.Operation{Task: "t-1", Key: "k-1"},
		Fence:     worker.Fence{Session: "s-1", Epoch: lease.Epoch + 1, CallID: "c-1", Task: "t-1", Key: "k-1"}}
	for _, probe := range ptl.Probes() {
		out, err := probe.Body(ctx, req)
		var res struct{ Answer string }
		if err != nil || json.Unmarshal(out, &res) != nil || res.Answer != "not_found" {
			t.Fatalf("prober: %s: %s, %v; want an authoritative not_found", probe.Metadata.Name, out, err)
		}
	}
	// The raise holds: the old writer's late charge is refused.
	wnc := rs.connect(t, access.RoleWorker)
	wjs, _ := jetstream.New(wnc)
	wtl, err := tools.New(ctx, tools.Config{JS: wjs})
	if err != nil {
		t.Fatal(err)
	}
	late := req
	late.Fence.Epoch = lease.Epoch
	if _, err := wtl.PaymentsChargeTool().Body(ctx, late); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late charge after the prober's raise: %v; want fence.ErrStale", err)
	}
	// A charge the probe finds.
	cur := req
	cur.CallID, cur.Fence.CallID = "c-2", "c-2"
	if _, err := wtl.PaymentsChargeTool().Body(ctx, cur); err != nil {
		t.Fatal(err)
	}
	out, err := ptl.PaymentsLookupTool().Body(ctx, cur)
	if err != nil || !strings.Contains(string(out), `"found"`) {
		t.Fatalf("prober: payments.lookup of a charge: %s, %v", out, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if _, err := js.Publish(sctx, "jw.reviews.s-1", []byte(`{"v":1}`)); err != nil {
		t.Errorf("prober: publish a review: %v", err)
	}
	cons, err := js.CreateOrUpdateConsumer(sctx, "JW_ASSESSMENTS", jetstream.ConsumerConfig{Durable: "jw-prober-t", FilterSubject: "jw.assessments.*", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("prober: consumer on the assessments: %v", err)
	}
	if _, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond)); err != nil {
		t.Errorf("prober: fetch assessments: %v", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.errs) != 0 {
		t.Errorf("violations: %v", v.errs)
	}
}
