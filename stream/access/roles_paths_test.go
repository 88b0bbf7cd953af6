package access_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
)

// asRole connects as r and opens the topology (no creation), as a client of
// that role does.
func (rs *roleServer) asRole(t *testing.T, r access.Role, cfg stream.TopologyConfig) (*nats.Conn, *stream.Topology) {
	t.Helper()
	nc := rs.connect(t, r)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := stream.OpenTopology(ctx, js, cfg)
	if err != nil {
		t.Fatalf("%s: open topology: %v", r, err)
	}
	return nc, topo
}

// violations collects the permission violations a connection reports.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) watch(nc *nats.Conn) {
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		v.mu.Lock()
		v.errs = append(v.errs, err.Error())
		v.mu.Unlock()
	})
}

// await waits until a violation mentioning subject arrives.
func (v *violations) await(t *testing.T, subject string) {
	t.Helper()
	streamtest.Eventually(t, 5*time.Second, "a permissions violation for "+subject, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, e := range v.errs {
			if strings.Contains(e, "Permissions Violation") && strings.Contains(e, `"`+subject) {
				return true
			}
		}
		return false
	})
}

// TestRolesLibraryPaths runs jingwei's own library calls under each role's
// account and permissions: the paths workers and recoverers take in the
// trusted account, and agents, reviewers and hosts take through their
// accounts' imports (OpenTopology, Load, requests and reviews with their
// PubAcks, plan reads, BucketKeys, the service, $SRV with two instances)
// work, and the ones the roles forbid fail.
func TestRolesLibraryPaths(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	workerNC, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	_, workerShort := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{LeaseTTL: time.Second})
	recNC, rec := rs.asRole(t, access.RoleRecoverer, stream.TopologyConfig{})
	agentNC, agent := rs.asRole(t, access.RoleAgent, stream.TopologyConfig{})
	reviewerNC, reviewer := rs.asRole(t, access.RoleReviewer, stream.TopologyConfig{})
	hostNC, host := rs.asRole(t, access.RoleHost, stream.TopologyConfig{})

	// Worker: lease, fence, append, renew; the example tools' buckets and
	// stream created from scratch.
	lease, err := worker.Leases().AcquireLease(ctx, "s-1", "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	// The worker fences and loads with message and direct gets: no
	// consumer on the session logs.
	log, h, err := worker.Logs().FenceLoad(ctx, "s-1", "worker-1", lease.Epoch)
	if err != nil {
		t.Fatalf("worker FenceLoad: %v", err)
	}
	if len(h) != 1 || h[0].Type != schema.TypeFenced {
		t.Fatalf("worker FenceLoad: %+v", h)
	}
	if _, err := log.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tools.New(ctx, tools.Config{JS: worker.JS}); err != nil {
		t.Fatalf("worker creates the tools' buckets and stream: %v", err)
	}
	if _, err := tools.New(ctx, tools.Config{JS: worker.JS}); err != nil {
		t.Fatalf("worker reuses the tools' buckets and stream: %v", err)
	}

	// Budgets: the worker counts a call; the host may not read budgets.
	budget := stream.NewBudget(worker.Budget)
	if u, err := budget.Add(ctx, "s-1", "t-1", 10); err != nil || u.ToolCalls != 1 {
		t.Fatalf("worker budget: %+v %v", u, err)
	}
	if err := budget.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	// Readers load a short history with message gets and direct gets.
	want, err := rs.topo.Logs().Load(ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	for name, topo := range map[string]*stream.Topology{"agent": agent, "reviewer": reviewer, "host": host, "worker": worker, "recoverer": rec} {
		h, err := topo.Logs().Load(ctx, "s-1")
		if err != nil || len(h) != len(want) {
			t.Errorf("%s: Load: %d events, %v", name, len(h), err)
		}
		if _, err := topo.Events.GetLastMsgForSubject(ctx, "jw.events.s-1"); err != nil {
			t.Errorf("%s: last event (direct get): %v", name, err)
		}
	}

	// Agent: a tool request with its PubAck; the worker consumes it with a
	// durable pull consumer and acks it away.
	ack, err := agent.JS.Publish(ctx, agent.Names().RequestsSubject("s-1"), []byte(`{"v":1}`), jetstream.WithMsgID("r-1"))
	if err != nil || ack.Stream != "JW_REQUESTS" {
		t.Fatalf("agent request: %v %v", ack, err)
	}
	cons, err := worker.Requests.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "JW_worker_s-1", FilterSubject: worker.Names().RequestsStoredSubject("s-1"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("worker acks the request: %v", err)
		}
	}
	if si, _ := rs.topo.Requests.Info(ctx); si.State.Msgs != 0 {
		t.Errorf("request still queued after the ack: %d", si.State.Msgs)
	}
	if err := worker.Requests.DeleteConsumer(ctx, "JW_worker_s-1"); err != nil {
		t.Fatal(err)
	}

	// Recoverer: the classifier's durable consumer on the session logs.
	ec, err := rec.JS.CreateOrUpdateConsumer(ctx, "JW_EVENTS", jetstream.ConsumerConfig{Durable: "JW_recoverer_events", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := ec.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range eb.Messages() {
		n++
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 {
		t.Errorf("recoverer read %d events, want 2", n)
	}

	// Recoverer issues a plan; the worker consumes it; the recoverer lists
	// the plan keys (kv.Keys: a push watcher with flow control); the host
	// reads and lists them without a consumer.
	plan := schema.Plan{PlanID: "p-1", Session: "s-1", Task: "t-1", Tool: "orders.create", Arguments: []byte(`{}`), Key: "op-1", PriorCallID: "c-1", PriorSeq: 2, Basis: "not_started"}
	if _, err := stream.NewPlans(rec.PlanBucket).Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	wp := stream.NewPlans(worker.PlanBucket)
	got, err := wp.Get(ctx, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wp.Consume(ctx, got, "c-2", 1); err != nil {
		t.Fatalf("worker consumes the plan: %v", err)
	}
	if keys, err := rec.PlanBucket.Keys(ctx); err != nil || len(keys) != 1 {
		t.Errorf("recoverer kv.Keys: %v %v", keys, err)
	}
	if _, err := host.PlanBucket.Get(ctx, "p-1"); err != nil {
		t.Errorf("host reads a plan record: %v", err)
	}
	if keys, err := stream.BucketKeys(ctx, host.JS, "jw_plans"); err != nil || len(keys) != 1 || keys[0] != "p-1" {
		t.Errorf("host BucketKeys: %v %v", keys, err)
	}
	var hv violations
	hv.watch(hostNC)
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := host.PlanBucket.Keys(lctx); err == nil {
		t.Error("host created a KV watcher (a consumer) on jw_plans")
	}
	lcancel()
	hv.await(t, "$JS.API.CONSUMER.CREATE.KV_jw_plans")
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	if _, err := host.PlanBucket.Put(pctx, "p-1", []byte("{}")); err == nil {
		t.Error("host wrote a plan record")
	}
	pcancel()
	hv.await(t, "$KV.jw_plans.p-1")

	// Recoverer: the plan on the plan log, an assessment; the host reads
	// both with the leader's and direct gets.
	if _, err := rec.JS.Publish(ctx, rec.Names().PlansSubject("s-1"), []byte(`{"v":1}`)); err != nil {
		t.Fatalf("recoverer publishes a plan: %v", err)
	}
	if _, err := rec.JS.Publish(ctx, rec.Names().AssessmentsSubject("s-1"), []byte(`{"v":1}`)); err != nil {
		t.Fatalf("recoverer publishes an assessment: %v", err)
	}
	for _, kind := range []string{"PLANS", "ASSESSMENTS"} {
		subj := map[string]string{"PLANS": host.Names().PlansStoredSubject("s-1"), "ASSESSMENTS": host.Names().AssessmentsSubject("s-1")}[kind]
		n := 0
		if err := host.Reader().ReadSubject(ctx, host.Names().StreamName(kind), subj, func(*jetstream.RawStreamMsg) error { n++; return nil }); err != nil || n != 1 {
			t.Errorf("host reads %s: %d messages, %v", kind, n, err)
		}
	}

	// Reviewer: a review with its PubAck, read back.
	var vv violations
	vv.watch(reviewerNC)
	if _, err := reviewer.JS.Publish(ctx, reviewer.Names().ReviewsSubject("s-1"), []byte(`{"v":1}`)); err != nil {
		t.Fatalf("reviewer publishes a review: %v %v", err, vv.errs)
	}
	if _, err := reviewer.Reviews.GetLastMsgForSubject(ctx, reviewer.Names().ReviewsSubject("s-1")); err != nil {
		t.Errorf("reviewer reads reviews: %v", err)
	}
	// The recoverer scans reviews with an ordered consumer; on the plan log
	// it may not (only workers consume JW_PLANS).
	oc, err := rec.JS.OrderedConsumer(ctx, "JW_REVIEWS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jw.reviews.s-1"}})
	if err != nil {
		t.Fatalf("recoverer scans reviews: %v", err)
	}
	if m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || m.Subject() != "jw.reviews.s-1" {
		t.Errorf("recoverer scans reviews: %v", err)
	}
	var rv violations
	rv.watch(recNC)
	octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := rec.JS.OrderedConsumer(octx, "JW_PLANS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jw.plans.s-1"}}); err == nil {
		t.Error("recoverer created a consumer on JW_PLANS")
	}
	ocancel()
	rv.await(t, "$JS.API.CONSUMER.CREATE.JW_PLANS")

	// Recoverer: the service, answered through the response permission;
	// agents call it, hosts list it with $SRV.
	svc, err := micro.AddService(recNC, micro.Config{Name: "jingwei", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) { _ = r.RespondJSON(map[string]bool{"ok": true}) }), micro.WithEndpointSubject("jw.api.status")); err != nil {
		t.Fatal(err)
	}
	// A second instance (on a connection of its own: the response
	// permission lets one connection answer each request once): $SRV.PING
	// has two responders, and both answers come back through the host's
	// import (response type stream).
	rec2NC := rs.connect(t, access.RoleRecoverer)
	svc2, err := micro.AddService(rec2NC, micro.Config{Name: "jingwei", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc2.Stop()
	recNC.Flush()
	rec2NC.Flush()
	resp, err := agentNC.Request("jw.api.status", nil, 5*time.Second)
	if err != nil || string(resp.Data) != `{"ok":true}` {
		t.Fatalf("agent's status request: %v %v", resp, err)
	}
	if resp, err := reviewerNC.Request("jw.api.status", nil, 5*time.Second); err != nil || string(resp.Data) != `{"ok":true}` {
		t.Fatalf("reviewer's status request: %v %v", resp, err)
	}
	pings, err := hostNC.SubscribeSync(hostNC.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := hostNC.PublishRequest("$SRV.PING.jingwei", pings.Subject, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if m, err := pings.NextMsg(5 * time.Second); err != nil || !strings.Contains(string(m.Data), `"name":"jingwei"`) {
			t.Fatalf("host's $SRV.PING, answer %d: %v %v", i+1, m, err)
		}
	}

	// Recoverer: lease expiry seen by the watcher (an ordered consumer on
	// KV_jw_leases); the worker's lease of s-2 is never renewed.
	expired, err := rec.Leases().WatchLeaseExpiry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workerShort.Leases().AcquireLease(ctx, "s-2", "worker-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-expired:
		if s != "s-2" {
			t.Errorf("expired %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lease expiry not reported to the recoverer")
	}

	// The agent cannot write the log, the plans or the budget.
	var av violations
	av.watch(agentNC)
	for _, subj := range []string{"jw.events.s-1", "$KV.jw_budget.s-1.t-1", "jw.plans.s-1"} {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := agent.JS.Publish(pctx, subj, []byte(`{}`))
		pcancel()
		if err == nil {
			t.Errorf("agent published on %s", subj)
		}
		av.await(t, subj)
	}
	var wv violations
	wv.watch(workerNC)
	if err := workerNC.Publish("jw.reviews.s-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	wv.await(t, "jw.reviews.s-1")
	if _, err := reviewerNC.Subscribe("jw.api.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	vv.await(t, "jw.api.>")
}

// TestRolesAgentPlainClient: a plain nats.go client with the agent's nkey
// seed file (what `nats --nkey agent.nk pub jw.events.x …` does) cannot
// publish a session event; nothing reaches the log.
func TestRolesAgentPlainClient(t *testing.T) {
	rs := startRoleServer(t)
	opt, err := nats.NkeyOptionFromSeed(rs.dir.SeedFile(access.RoleAgent))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	nc, err := nats.Connect(rs.srv.ClientURL(), opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("jw.events.x", []byte(`{"v":1,"type":"tool.result"}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `Permissions Violation for Publish to "jw.events.x"`) {
			t.Fatalf("error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation")
	}
	// A request (what `nats req` and a JetStream publish do) gets no answer.
	if _, err := nc.Request("jw.events.x", []byte(`{}`), 500*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("request: %v", err)
	}
	ctx := context.Background()
	if _, err := rs.topo.Events.GetLastMsgForSubject(ctx, "jw.events.x"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the log got a message: %v", err)
	}
	// What the agent may do, the same client does: a request, PubAck back.
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(ctx, "jw.requests.x", []byte(`{"v":1}`)); err != nil {
		t.Errorf("agent's request: %v", err)
	}
}
