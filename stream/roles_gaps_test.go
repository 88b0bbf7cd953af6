package stream_test

// Limits of subject permissions inside one account, pinned so that whoever
// closes them (separate accounts, or checks in the readers) sees these
// tests change. Both bypass a role's publish permissions: the server itself
// publishes on a subject the client named.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
)

// waitLast polls for the last message on subject in s.
func waitLast(t *testing.T, s jetstream.Stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := s.GetLastMsgForSubject(context.Background(), subject)
		if err == nil {
			return m
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) || time.Now().After(deadline) {
			t.Fatalf("nothing on %s: %v", subject, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRolesGapReplySubjectReachesStreams: a reply subject is not checked
// against the publisher's permissions, and JetStream sends its PubAck (or
// API answer) to it; a stream listening there stores it. So an agent, which
// may not write budgets or session logs, can have the server write a PubAck
// into jw_budget (a record that decodes as zero calls, no limit) and into
// any session log.
func TestRolesGapReplySubjectReachesStreams(t *testing.T) {
	rs := startRoleServer(t)
	agent := rs.connect(t, stream.RoleAgent)
	for _, reply := range []string{"$KV.jw_budget.s-1.t-1", "jw.events.victim"} {
		if err := agent.PublishMsg(&nats.Msg{Subject: "jw.requests.s-1", Reply: reply, Data: []byte(`{"v":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	agent.Flush()
	ctx := context.Background()
	budget, err := rs.topo.JS.Stream(ctx, "KV_jw_budget")
	if err != nil {
		t.Fatal(err)
	}
	m := waitLast(t, budget, "$KV.jw_budget.s-1.t-1")
	var u stream.Usage
	if err := json.Unmarshal(m.Data, &u); err != nil || u != (stream.Usage{}) {
		t.Errorf("budget record %s decodes as %+v, %v", m.Data, u, err)
	}
	t.Logf("GAP: the agent's PubAck landed in jw_budget as %s (decodes as %+v: no limit)", m.Data, u)
	m = waitLast(t, rs.topo.Events, "jw.events.victim")
	t.Logf("GAP: and in the session log jw.events.victim as %s", m.Data)
}

// TestRolesGapPushConsumerDeliversAnywhere: the deliver subject of a push
// consumer is not checked against its creator's permissions. A worker, which
// may not publish on _INBOX (a forged reply), can have the server deliver
// the plan log to any inbox: whoever waits there for a reply gets a plan
// record instead. Any role with consumer rights on a stream can have that
// stream's messages published on any subject that has a subscriber.
func TestRolesGapPushConsumerDeliversAnywhere(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rs.topo.JS.Publish(ctx, "jw.plans.s-1", []byte(`{"plan_id":"p-1"}`)); err != nil {
		t.Fatal(err)
	}
	victim := rs.connect(t, stream.RoleAgent)
	inbox := victim.NewInbox()
	sub, err := victim.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	victim.Flush()
	_, worker := rs.asRole(t, stream.RoleWorker, stream.TopologyConfig{})
	if _, err := worker.PlanLog.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "redirect", DeliverSubject: inbox, AckPolicy: jetstream.AckNonePolicy,
	}); err != nil {
		t.Fatalf("push consumer: %v", err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("nothing delivered to the victim's inbox: %v", err)
	}
	t.Logf("GAP: the worker's push consumer delivered %s to another client's inbox %s", m.Data, inbox)
}
