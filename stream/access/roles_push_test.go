package access_test

// Red-team tests of one trusted role's push consumers. A consumer's deliver
// subject is not checked against its creator's permissions: the server
// delivers the consumer's messages, with the rights of the account that
// holds the streams, on any subject of the trusted account — and a stream
// listening there stores them. TestRolesLimitPushConsumerDeliversInTrustedAccount
// pins the reply-inbox case; these pin the subjects each role is denied
// (deny jw.plans.>, jw.assessments.>, jw.reviews.>, jw.approvals.*.stop
// for the worker; jw.answers.>, jw.reviews.>, jw.approvals.* for the
// recoverer; and the services it must not call). Each test passes only
// if the server refuses the consumer or stores nothing on the denied
// subject.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

// countOn returns, as admin, how many messages streamName holds on subject.
func (rs *roleServer) countOn(t *testing.T, streamName, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(rs.admin)
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// redirect creates on src, with the rights of src's connection, a durable
// push consumer of the messages on filter delivered to target in queue
// group group ("" for none). It returns the server's refusal, or whether
// the consumer is bound — a push consumer delivers only while a client
// subscribes to its literal deliver subject (in group, with one); a
// stream's own subscription to its wildcard subjects does not count — and
// how many messages it delivered. An unbound consumer with nothing
// delivered stores nothing anywhere.
func redirect(ctx context.Context, src jetstream.Stream, name, filter, target, group string) (bound bool, delivered uint64, err error) {
	c, err := src.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: filter, DeliverSubject: target, DeliverGroup: group,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return false, 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, 0, err
	}
	return info.PushBound, info.Delivered.Stream, nil
}

// TestRolesWorkerPushConsumerWritesDeniedSubjects: with the worker's
// credentials only, the session's task is stopped (a host's right: any
// plan of the session, delivered on jw.approvals.<session>.stop, is a
// valid stop of its task), a review the worker read from JW_REVIEWS is
// published again (a reviewer's right), an assessment and a plan are
// stored (the recoverer's). The worker may publish its own bytes on
// jw.approvals.*.request and consume JW_APPROVALS and JW_PLANS; the
// server's only check on a deliver subject is that it is not one of the
// consumer's own stream.
func TestRolesWorkerPushConsumerWritesDeniedSubjects(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sess = "s-1"
	// A plan of s-1 on JW_PLANS and a review of s-1 on JW_REVIEWS, as
	// the recoverer and a reviewer would have published them.
	plan := []byte(`{"v":1,"plan_id":"p-1","session":"s-1","task":"t-1","tool":"payments.charge","arguments":{},"key":"k-1","prior_call_id":"c-1","prior_seq":1,"basis":"not_started","review":null,"issued_at":"2026-11-29T10:06:00Z"}`)
	if _, err := rs.topo.JS.Publish(ctx, rs.topo.Names().PlansSubject(sess), plan); err != nil {
		t.Fatal(err)
	}
	review := []byte(`{"v":1,"session":"s-1","call_id":"c-1","operator":"alice@ops","evidence":"ticket-1","verdict":"not_executed","at":"2026-11-29T10:05:00Z","signer":"U","sig":"s"}`)
	if _, err := rs.topo.JS.Publish(ctx, rs.topo.Names().ReviewsSubject(sess), review); err != nil {
		t.Fatal(err)
	}
	_, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	// The worker reads the review (its right) and stores it, and an
	// assessment and a plan of its own making, where it may: on an
	// approval-request subject of a session nobody uses.
	got, err := worker.Reviews.GetLastMsgForSubject(ctx, worker.Names().ReviewsSubject(sess))
	if err != nil {
		t.Fatalf("the worker reads reviews: %v", err)
	}
	assessment := []byte(`{"session":"s-1","call_id":"c-1","tool":"payments.charge","task":"t-1","key":"k-1","contract":{"effect":"non_idempotent","revision":"v1"},"outcome":"completed","evidence":"ok","decision":"refuse","attempts":1,"chain":["c-1"]}`)
	carriers := map[string][]byte{"zz-review": got.Data, "zz-assessment": assessment, "zz-plan": plan}
	for carrier, body := range carriers {
		if _, err := worker.JS.Publish(ctx, worker.Names().ApprovalRequestsSubject(carrier), body); err != nil {
			t.Fatalf("the worker publishes an approval request: %v", err)
		}
	}
	cases := []struct {
		name     string
		src      jetstream.Stream
		filter   string
		target   string
		dest     string // the stream that stores target
		stored   string // the subject target is stored under
		rightsOf string
	}{
		{"task stop", worker.PlanLog, worker.Names().PlansStoredSubject(sess), stream.StopSubject("", sess), "JW_APPROVALS", stream.StopSubject("", sess), "host"},
		{"review replay", worker.ApprovalLog, worker.Names().ApprovalRequestsSubject("zz-review"), worker.Names().ReviewsSubject(sess), "JW_REVIEWS", worker.Names().ReviewsSubject(sess), "reviewer"},
		{"assessment", worker.ApprovalLog, worker.Names().ApprovalRequestsSubject("zz-assessment"), worker.Names().AssessmentsSubject(sess), "JW_ASSESSMENTS", worker.Names().AssessmentsSubject(sess), "recoverer"},
		{"plan", worker.ApprovalLog, worker.Names().ApprovalRequestsSubject("zz-plan"), worker.Names().PlansSubject("s-2"), "JW_PLANS", worker.Names().PlansStoredSubject("s-2"), "recoverer"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := rs.countOn(t, tc.dest, tc.stored)
			bound, delivered, err := redirect(ctx, tc.src, "redirect-"+string(rune('a'+i)), tc.filter, tc.target, "")
			if err != nil {
				t.Logf("stopped by the server: the push consumer to %s is refused: %v", tc.target, err)
				return
			}
			if bound || delivered > 0 {
				t.Errorf("HOLE: with the worker's credentials, a push consumer delivers on %s (the %s's subject, denied to the worker): bound %v, %d delivered", tc.target, tc.rightsOf, bound, delivered)
			}
			if n := rs.countOn(t, tc.dest, tc.stored); n > before {
				m, _ := jsAdmin(rs).GetLastMsg(ctx, tc.dest, tc.stored)
				t.Errorf("HOLE: %s stored a message on %s delivered by the worker's push consumer: %s", tc.dest, tc.stored, m)
			}
			t.Logf("stopped by the server: the consumer to %s is created but never bound (no client subscribes to the literal subject), nothing delivered", tc.target)
		})
	}
	// What the stop means: the stored message is a valid task stop.
	if m, err := jsAdmin(rs).GetLastMsg(ctx, "JW_APPROVALS", stream.StopSubject("", sess)); err == nil {
		var st schema.StopRequest
		if err := json.Unmarshal([]byte(m), &st); err == nil && st.Validate() == nil {
			t.Errorf("HOLE: the worker stopped task %q of session %q: %s", st.Task, st.Session, m)
		}
	}
}

// adminJS reads single messages as admin.
type adminJS struct{ js jetstream.JetStream }

func jsAdmin(rs *roleServer) adminJS {
	js, _ := jetstream.New(rs.admin)
	return adminJS{js}
}

// GetLastMsg returns the data of the last message on subject in streamName.
func (a adminJS) GetLastMsg(ctx context.Context, streamName, subject string) (string, error) {
	s, err := a.js.Stream(ctx, streamName)
	if err != nil {
		return "", err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return "", err
	}
	return string(m.Data), nil
}

// TestRolesRecovererPushConsumerWritesDeniedSubjects: with the
// recoverer's credentials only, which may publish anything on
// jw.events.<session> (a throwaway session's log) and consume JW_EVENTS,
// a push consumer stores a tool request (an agent's right: a new call
// with a side effect, run by the tool workers), an answer (a tool
// worker's: a request refused that may run), a task stop (a host's) and
// an approval (an approver's).
func TestRolesRecovererPushConsumerWritesDeniedSubjects(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sess = "s-1"
	_, rec := rs.asRole(t, access.RoleRecoverer, stream.TopologyConfig{})
	bodies := map[string][]byte{
		"zz-request": []byte(`{"v":1,"request_id":"r-evil","session":"s-1","task":"t-1","tool":"payments.charge","arguments":{"amount_cents":100000}}`),
		"zz-answer":  []byte(`{"v":1,"session":"s-1","request_id":"r-9","code":"unknown_tool","message":"no such tool","at":"2026-11-29T10:00:01Z"}`),
		"zz-stop":    []byte(`{"v":1,"session":"s-1","task":"t-1","reason":"stopped by the recoverer"}`),
		"zz-approve": []byte(`{"v":1,"session":"s-1","call_id":"c-2","decision":"approved","approver":"alice@finance","at":"2026-11-29T10:04:00Z"}`),
	}
	for carrier, body := range bodies {
		if _, err := rec.JS.Publish(ctx, rec.Names().EventsSubject(carrier), body); err != nil {
			t.Fatalf("the recoverer publishes on a session log: %v", err)
		}
	}
	cases := []struct {
		name, carrier, target, dest, stored, rightsOf string
	}{
		{"tool request", "zz-request", rec.Names().RequestsSubject(sess), "JW_REQUESTS", rec.Names().RequestsStoredSubject(sess), "agent"},
		{"answer", "zz-answer", rec.Names().AnswersSubject(sess), "JW_ANSWERS", rec.Names().AnswersSubject(sess), "worker"},
		{"task stop", "zz-stop", stream.StopSubject("", sess), "JW_APPROVALS", stream.StopSubject("", sess), "host"},
		{"approval", "zz-approve", rec.Names().ApprovalsSubject(sess), "JW_APPROVALS", rec.Names().ApprovalsSubject(sess), "approver"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := rs.countOn(t, tc.dest, tc.stored)
			bound, delivered, err := redirect(ctx, rec.Events, "redirect-"+string(rune('a'+i)), rec.Names().EventsSubject(tc.carrier), tc.target, "")
			if err != nil {
				t.Logf("stopped by the server: the push consumer to %s is refused: %v", tc.target, err)
				return
			}
			if bound || delivered > 0 {
				t.Errorf("HOLE: with the recoverer's credentials, a push consumer delivers on %s (the %s's subject, denied to the recoverer): bound %v, %d delivered", tc.target, tc.rightsOf, bound, delivered)
			}
			if n := rs.countOn(t, tc.dest, tc.stored); n > before {
				m, _ := jsAdmin(rs).GetLastMsg(ctx, tc.dest, tc.stored)
				t.Errorf("HOLE: %s stored a message on %s delivered by the recoverer's push consumer: %s", tc.dest, tc.stored, m)
			}
			t.Logf("stopped by the server: the consumer to %s is created but never bound (no client subscribes to the literal subject), nothing delivered", tc.target)
		})
	}
}

// prepareRequests returns how many requests the jingwei service's prepare
// endpoints have answered (micro counts a request once its handler
// returned).
func (rs *roleServer) prepareRequests(t *testing.T) int {
	t.Helper()
	subj, err := micro.ControlSubject(micro.StatsVerb, "jingwei", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rs.admin.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(resp.Data, &st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range st.Endpoints {
		if e.Name == "prepare" {
			n += e.NumRequests
		}
	}
	return n
}

// TestRolesWorkerCannotAskPrepareThroughAPushConsumer: only a host asks
// jw.api.prepare, and a tool worker runs every plan published on the plan
// log: a plan the host did not ask for is a retry behind its back. The
// worker may not publish on jw.api.prepare; it stores the request body on
// an approval-request subject and has its push consumer deliver it on
// jw.api.prepare. The jingwei service must not act on a message a
// consumer delivered (its reply subject is the consumer's ack subject,
// $JS.ACK.…): no plan may be issued.
func TestRolesWorkerCannotAskPrepareThroughAPushConsumer(t *testing.T) {
	rs := startRoleServer(t)
	rs.runRecoverer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sess = "s-p"
	_, worker := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	// A call recorded and never started (its writer gone, no lease held):
	// retry_allowed, basis not_started.
	lg, err := worker.Logs().OpenLog(ctx, sess, "w-gone", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "payments.charge", Arguments: []byte(`{"amount_cents":5}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-1", Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "v1"}}}}); err != nil {
		t.Fatal(err)
	}
	planID := recovery.PlanID(sess, "c-1")
	before := rs.prepareRequests(t)
	if _, err := worker.JS.Publish(ctx, worker.Names().ApprovalRequestsSubject("zz-prepare"), []byte(`{"session":"s-p","call_id":"c-1"}`)); err != nil {
		t.Fatal(err)
	}
	// The service's endpoints subscribe in micro's queue group: the
	// consumer delivers to that group.
	bound, _, err := redirect(ctx, worker.ApprovalLog, "ask-prepare", worker.Names().ApprovalRequestsSubject("zz-prepare"), worker.Names().APISubject("prepare"), micro.DefaultQueueGroup)
	if err != nil {
		t.Logf("stopped by the server: %v", err)
		return
	}
	if !bound {
		t.Fatal("the consumer to the prepare endpoints' queue group is not bound")
	}
	deadline := time.Now().Add(10 * time.Second)
	for rs.prepareRequests(t) == before {
		if time.Now().After(deadline) {
			t.Fatal("the delivered request never reached the prepare endpoint")
		}
		time.Sleep(20 * time.Millisecond) // polling micro's stats with a deadline
	}
	if _, err := rs.topo.PlanBucket.Get(ctx, planID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("HOLE: with the worker's credentials, prepare was asked through a push consumer and issued plan %s (record: %v): a retry the host never asked for", planID, err)
	}
	if n := rs.countOn(t, "JW_PLANS", worker.Names().PlansStoredSubject(sess)); n != 0 {
		t.Errorf("HOLE: %d plan(s) published for %s without a host asking", n, sess)
	}
	// A host still gets the plan when it asks.
	host := rs.connect(t, access.RoleHost)
	resp, err := host.Request(stream.APISubject("", "prepare"), []byte(`{"session":"s-p","call_id":"c-1"}`), 20*time.Second)
	if err != nil || resp.Header.Get("Nats-Service-Error") != "" {
		t.Fatalf("host prepare: %v %v", resp, err)
	}
	var p schema.Plan
	if err := json.Unmarshal(resp.Data, &p); err != nil || p.PlanID != planID {
		t.Fatalf("host prepare: %s %v", resp.Data, err)
	}
}
