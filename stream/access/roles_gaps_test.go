package access_test

// The attacks that subject permissions in one account could not stop, and
// that the roles' accounts close: a reply subject is not checked against the
// publisher's permissions, and JetStream (or the recoverer, through its
// response permission) answers on it with the rights of the account that
// holds the streams; and every client of one account sees every other
// client's reply inboxes. Each untrusted role now has an account of its
// own, so both stay inside it. One limit remains among the trusted roles
// and is pinned here: a push consumer's deliver subject.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// injectedReplies are reply subjects that, in one account, would have the
// server's answer stored in a bucket or a stream: a budget record that
// reads as "no limit", a plan record, a lease, and messages in a session
// log (which denies deletes: corrupt for good), the plan log and the
// assessments. The last two are subjects the agent's and the reviewer's
// own accounts import: an answer delivered there must not travel on
// through the import into the work queue or the reviews.
var injectedReplies = []string{"$KV.jw_budget.s.t", "$KV.jw_plans.x", "$KV.jw_leases.x", "jw.events.s1", "jw.plans.s1", "jw.assessments.s1", "jw.requests.loop", "jw.reviews.loop"}

// jingweiStreams are every stream and bucket stream of the topology.
var jingweiStreams = []string{"JW_EVENTS", "JW_REQUESTS", "JW_REVIEWS", "JW_PLANS", "JW_ASSESSMENTS", "KV_jw_leases", "KV_jw_plans", "KV_jw_budget"}

// stored returns, as admin, every stream's subjects and their message
// counts.
func (rs *roleServer) stored(t *testing.T) map[string]map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(rs.admin)
	out := map[string]map[string]uint64{}
	for _, name := range jingweiStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		// Partitioned streams store jw.requests.<session> as
		// jw.requests.<partition>.<session>: counted under the subject
		// it was published on.
		out[name] = map[string]uint64{}
		for subj, n := range info.State.Subjects {
			if parts := strings.Split(subj, "."); len(parts) == 4 {
				subj = parts[0] + "." + parts[1] + "." + parts[3]
			}
			out[name][subj] += n
		}
	}
	return out
}

// barrier stores one message, as admin, in every stream and bucket: once
// each is acknowledged, everything the server queued for those streams
// before has been stored too. It returns the subjects it used.
func (rs *roleServer) barrier(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(rs.admin)
	subjects := map[string]string{
		"JW_EVENTS": "jw.events.zz-barrier", "JW_REQUESTS": "jw.requests.zz-barrier", "JW_REVIEWS": "jw.reviews.zz-barrier",
		"JW_PLANS": "jw.plans.zz-barrier", "JW_ASSESSMENTS": "jw.assessments.zz-barrier",
		"KV_jw_leases": "$KV.jw_leases.zz-barrier", "KV_jw_plans": "$KV.jw_plans.zz-barrier", "KV_jw_budget": "$KV.jw_budget.zz-barrier",
	}
	for _, name := range jingweiStreams {
		if _, err := js.Publish(ctx, subjects[name], []byte(`{"barrier":true}`)); err != nil {
			t.Fatalf("barrier on %s: %v", name, err)
		}
	}
	return subjects
}

// assertOnlyAdded checks that between before and after, nothing but the
// barrier and the expected subjects got a message.
func assertOnlyAdded(t *testing.T, before, after map[string]map[string]uint64, barrier map[string]string, expected map[string]uint64) {
	t.Helper()
	for _, name := range jingweiStreams {
		for subj, n := range after[name] {
			added := n - before[name][subj]
			switch {
			case added == 0:
			case subj == barrier[name] && added == 1:
			case expected[subj] == added:
			default:
				t.Errorf("ATTACK: %d message(s) stored on %s in %s", added, subj, name)
			}
		}
	}
	for subj, n := range expected {
		found := false
		for _, name := range jingweiStreams {
			if after[name][subj]-before[name][subj] == n {
				found = true
			}
		}
		if !found {
			t.Errorf("the legitimate %d message(s) on %s were not stored", n, subj)
		}
	}
}

// importReplies subscribes, as admin in the trusted account, to _R_.>:
// the reply subjects a service import gives the requests it carries in.
// Every answer to an untrusted role's request is published there.
func (rs *roleServer) importReplies(t *testing.T) *nats.Subscription {
	t.Helper()
	s, err := rs.admin.SubscribeSync("_R_.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Unsubscribe() })
	return s
}

// awaitAnswers waits until n answers went out on the imports' reply
// subjects, and returns them.
func awaitAnswers(t *testing.T, s *nats.Subscription, n int) []*nats.Msg {
	t.Helper()
	var out []*nats.Msg
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		m, err := s.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("%d of %d answers on _R_.> seen: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRolesReplySubjectStaysInAccount: an agent publishing a request, a
// reviewer publishing a review, and a host reading a stream, each with a
// reply subject that names a bucket or a stream subject, get the answer
// published in their own account, where no stream listens: nothing is
// stored in any jingwei stream or bucket. (In one account, the agent's
// PubAck {"stream":"JW_REQUESTS","seq":1} was stored in jw_budget, read
// back as "no limit", and in a session log, for good.)
func TestRolesReplySubjectStaysInAccount(t *testing.T) {
	rs := startRoleServer(t)
	agent := rs.connect(t, access.RoleAgent)
	reviewer := rs.connect(t, access.RoleReviewer)
	host := rs.connect(t, access.RoleHost)
	answers := rs.importReplies(t)
	before := rs.stored(t)
	sent := 0
	for _, reply := range injectedReplies {
		if err := agent.PublishMsg(&nats.Msg{Subject: "jw.requests.x", Reply: reply, Data: []byte(`{"v":1}`)}); err != nil {
			t.Fatal(err)
		}
		if err := reviewer.PublishMsg(&nats.Msg{Subject: "jw.reviews.x", Reply: reply, Data: []byte(`{"v":1}`)}); err != nil {
			t.Fatal(err)
		}
		for _, subj := range []string{"$JS.API.STREAM.INFO.JW_EVENTS", "$JS.API.STREAM.MSG.GET.JW_PLANS", "$JS.API.DIRECT.GET.KV_jw_plans.$KV.jw_plans.x"} {
			body := []byte(nil)
			if subj == "$JS.API.STREAM.MSG.GET.JW_PLANS" {
				body = []byte(`{"last_by_subj":"jw.plans.x"}`)
			}
			if err := host.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: body}); err != nil {
				t.Fatal(err)
			}
		}
		sent += 5
	}
	for _, nc := range []*nats.Conn{agent, reviewer, host} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Every answer went out on a _R_ reply subject, mapped back to the
	// requester's account.
	got := awaitAnswers(t, answers, sent)
	barrier := rs.barrier(t)
	after := rs.stored(t)
	assertOnlyAdded(t, before, after, barrier, map[string]uint64{
		"jw.requests.x": uint64(len(injectedReplies)), "jw.reviews.x": uint64(len(injectedReplies)),
	})
	example := got[0]
	for _, m := range got {
		if len(m.Data) > 0 {
			example = m
			break
		}
	}
	t.Logf("%d answers published on the imports' reply subjects (e.g. %s: %s); nothing stored on %v", len(got), example.Subject, example.Data, injectedReplies)
	// The budget reads as it did: no record.
	ctx := context.Background()
	if _, err := rs.topo.Budget.Get(ctx, "s.t"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("budget record s.t: %v", err)
	}
}

// runRecoverer runs a real recoverer as the recoverer role until the test
// ends and waits until its service answers.
func (rs *roleServer) runRecoverer(t *testing.T) {
	t.Helper()
	_, topo := rs.asRole(t, access.RoleRecoverer, stream.TopologyConfig{})
	planner, err := rs.dir.PlannerKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	r, err := recoverer.New(recoverer.Config{Topology: topo, PlannerKey: planner, Name: "roles"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("recoverer: %v", err)
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("recoverer did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("recoverer not ready")
	}
}

// TestRolesServiceReplyStaysInAccount: the same through the recoverer's
// micro service, whose response permission would answer on any reply
// subject the requester chose: an agent, a reviewer and a host calling
// jw.api.status with such a reply subject have the answer published in
// their own account; nothing is stored. A plain status request still
// works.
func TestRolesServiceReplyStaysInAccount(t *testing.T) {
	rs := startRoleServer(t)
	rs.runRecoverer(t)
	agent := rs.connect(t, access.RoleAgent)
	reviewer := rs.connect(t, access.RoleReviewer)
	host := rs.connect(t, access.RoleHost)
	for _, nc := range []*nats.Conn{agent, reviewer, host} {
		resp, err := nc.Request("jw.api.status", []byte(`{}`), 10*time.Second)
		if err != nil || resp.Header.Get("Nats-Service-Error") != "" {
			t.Fatalf("status: %v %v", resp, err)
		}
	}
	answers := rs.importReplies(t)
	before := rs.stored(t)
	sent := 0
	for _, reply := range injectedReplies {
		for _, nc := range []*nats.Conn{agent, reviewer, host} {
			if err := nc.PublishMsg(&nats.Msg{Subject: "jw.api.status", Reply: reply, Data: []byte(`{"session":"s1"}`)}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	got := awaitAnswers(t, answers, sent)
	barrier := rs.barrier(t)
	after := rs.stored(t)
	assertOnlyAdded(t, before, after, barrier, nil)
	t.Logf("the recoverer answered %d injected status requests on _R_ subjects (e.g. %s); nothing stored", len(got), got[0].Subject)
}

// TestRolesNoSnoopingAcrossAccounts: an agent subscribed to _INBOX.> sees
// none of the replies of the host's and the reviewer's requests, nor the
// PubAcks of the worker's appends; it does see the replies of another agent
// client (one role, one account: the limit that remains).
func TestRolesNoSnoopingAcrossAccounts(t *testing.T) {
	rs := startRoleServer(t)
	rs.runRecoverer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := rs.connect(t, access.RoleAgent)
	spy, err := agent.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	hostNC, host := rs.asRole(t, access.RoleHost, stream.TopologyConfig{})
	_, reviewer := rs.asRole(t, access.RoleReviewer, stream.TopologyConfig{})
	_, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})

	lease, err := worker.Leases().AcquireLease(ctx, "s-1", "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := worker.Logs().OpenLog(ctx, "s-1", "worker-1", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "t", Arguments: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := hostNC.Request("jw.api.status", []byte(`{}`), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := host.Logs().Load(ctx, "s-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reviewer.JS.Publish(ctx, "jw.reviews.s-1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	// Everything those replies could have sent the agent was written to its
	// connection before its PONG.
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := spy.Pending(); n != 0 {
		m, _ := spy.NextMsg(0)
		t.Fatalf("ATTACK: the agent saw %d replies of other roles, e.g. on %s: %s", n, m.Subject, m.Data)
	}
	// Another agent client is in the same account: its replies are seen.
	other := rs.connect(t, access.RoleAgent)
	if _, err := other.Request("jw.api.status", []byte(`{}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(5 * time.Second); err != nil {
		t.Errorf("the agent does not see its own account's replies either (the spy is deaf): %v", err)
	} else {
		t.Logf("LIMIT: clients of one role share its account: an agent sees another agent's reply on %s", m.Subject)
	}
}

// TestRolesAgentCannotFollowEvents: the agent may not core-subscribe to the
// session logs any more (it reads them with direct gets); the server
// refuses the subscription.
func TestRolesAgentCannotFollowEvents(t *testing.T) {
	rs := startRoleServer(t)
	agent := rs.connect(t, access.RoleAgent)
	var v violations
	v.watch(agent)
	if _, err := agent.SubscribeSync("jw.events.>"); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.SubscribeSync("jw.events.s-1"); err != nil {
		t.Fatal(err)
	}
	agent.Flush()
	v.await(t, "jw.events.>")
	v.await(t, "jw.events.s-1")
}

// TestRolesLimitPushConsumerDeliversInTrustedAccount: the deliver subject
// of a push consumer is not checked against its creator's permissions. A
// worker, which may not publish on _INBOX (a forged reply), can have the
// server deliver the plan log to any inbox of its own account: whoever of
// the trusted roles waits there for a reply gets a plan record instead.
// This is a limit of the trusted roles, which share one account (only the
// worker and the recoverer may create consumers); the same inbox name in
// an untrusted role's account receives nothing.
func TestRolesLimitPushConsumerDeliversInTrustedAccount(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rs.topo.JS.Publish(ctx, "jw.plans.s-1", []byte(`{"plan_id":"p-1"}`)); err != nil {
		t.Fatal(err)
	}
	victim := rs.connect(t, access.RoleRecoverer)
	inbox := victim.NewInbox()
	sub, err := victim.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	victim.Flush()
	agent := rs.connect(t, access.RoleAgent)
	asub, err := agent.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	agent.Flush()
	_, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	if _, err := worker.PlanLog.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "redirect", DeliverSubject: inbox, AckPolicy: jetstream.AckNonePolicy,
	}); err != nil {
		t.Fatalf("push consumer: %v", err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("nothing delivered to the recoverer's inbox: %v", err)
	}
	t.Logf("LIMIT: the worker's push consumer delivered %s to the recoverer's inbox %s", m.Data, inbox)
	agent.Flush()
	if n, _, _ := asub.Pending(); n != 0 {
		t.Errorf("the push consumer reached the agent's account: %d messages", n)
	}
}
