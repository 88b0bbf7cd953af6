package toolworker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestRequestIDBoundToContent: an agent publishes its own payments.charge
// under another agent's predictable request id in that agent's session —
// under the Msg-Id the victim's client will use (the id's session-scoped
// form) and under its own request's content-bound one. Then the victim
// publishes its request. The victim must never get the attacker's call
// for its own: its request is refused with request_conflict on
// jw.answers, nothing of it runs, and the attacker's request replayed
// (same content, another Msg-Id: a redelivery after the dedup window) is
// acknowledged without running again or being answered. Before, the
// victim's publish was a duplicate of the attacker's (same Msg-Id),
// dropped without a call or an answer, and a request with the id already
// on the log was acknowledged as answered whatever it asked for.
func TestRequestIDBoundToContent(t *testing.T) {
	w := startRoles(t, stream.TopologyConfig{LeaseTTL: time.Second})
	var l ledger
	start(t, toolworker.Config{Topology: w.worker, Registry: registry(t, l.tool(0)), PollInterval: 50 * time.Millisecond, DisableGateway: true})
	const sess = "s-victim"
	victim := schema.Request{V: 1, RequestID: "r-1", Session: sess, Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"account":"victim","amount":5}`)}
	attack := victim
	attack.Arguments = json.RawMessage(`{"account":"attacker","amount":500}`)

	w.publishAs(t, attack, stream.RequestMsgID(sess, attack.RequestID))
	if contentMsgID(t, attack) != stream.RequestMsgIDOf(attack) {
		t.Fatalf("stream.RequestMsgIDOf %q, the contract says %q", stream.RequestMsgIDOf(attack), contentMsgID(t, attack))
	}
	w.publishAs(t, attack, contentMsgID(t, attack))
	streamtest.Eventually(t, 20*time.Second, "the attacker's charge recorded", func() bool {
		_, done, _ := w.callOf(t, sess, "r-1")
		return done
	})
	// The same request again, as a redelivery: acknowledged, not run.
	w.publishAs(t, attack, "replayed-after-the-window")
	streamtest.Eventually(t, 20*time.Second, "the replay handled", func() bool { return waiting(t, w.admin) == 0 })
	if a, ok := w.answer(t, sess, "r-1"); ok {
		t.Fatalf("the attacker's own request replayed was answered %+v", a)
	}

	if ack := w.publishAs(t, victim, contentMsgID(t, victim)); ack.Duplicate {
		t.Fatalf("the victim's request was taken for a duplicate of the attacker's: dropped, never answered")
	}
	streamtest.Eventually(t, 20*time.Second, "the victim's request answered", func() bool {
		_, ok := w.answer(t, sess, "r-1")
		return ok || waiting(t, w.admin) == 0 && l.charged("victim") > 0
	})
	a, ok := w.answer(t, sess, "r-1")
	if !ok || a.Code != schema.CodeRequestConflict {
		t.Fatalf("victim's answer %+v (found %v), want %s; charges: victim %d attacker %d", a, ok, schema.CodeRequestConflict, l.charged("victim"), l.charged("attacker"))
	}
	if c, _, n := w.callOf(t, sess, "r-1"); n != 1 || string(c.Arguments) != string(attack.Arguments) {
		t.Fatalf("%d calls for r-1 (last %+v), want only the attacker's", n, c)
	}
	if l.charged("victim") != 0 || l.charged("attacker") != 1 {
		t.Fatalf("charges: victim %d attacker %d, want 0 and 1", l.charged("victim"), l.charged("attacker"))
	}
}

// TestRefusalNotAnotherRequestsAnswer: an agent claims another agent's
// predictable request id with a request the worker refuses (an unknown
// tool): its refusal is recorded on jw.answers under that id. The
// victim's own request under the id then runs — and a reader looking for
// the victim's answer must not take the attacker's refusal for it (the
// victim, told unknown_tool, would send its payment again under a new id
// while the first one charged). Answers carry the digest of the request
// they answer, and FindAnswerFor finds only the answer to that request.
func TestRefusalNotAnotherRequestsAnswer(t *testing.T) {
	w := startRoles(t, stream.TopologyConfig{LeaseTTL: time.Second})
	var l ledger
	start(t, toolworker.Config{Topology: w.worker, Registry: registry(t, l.tool(0)), PollInterval: 50 * time.Millisecond, DisableGateway: true})
	const sess = "s-victim"
	victim := schema.Request{V: 1, RequestID: "r-1", Session: sess, Task: "t-1", Tool: "payments.charge", Arguments: json.RawMessage(`{"account":"victim","amount":5}`)}
	attack := victim
	attack.Tool = "payments.nothing"
	w.publishAs(t, attack, stream.RequestMsgIDOf(attack))
	streamtest.Eventually(t, 20*time.Second, "the attacker's request refused", func() bool {
		_, ok := w.answer(t, sess, "r-1")
		return ok
	})
	w.publishAs(t, victim, stream.RequestMsgIDOf(victim))
	streamtest.Eventually(t, 20*time.Second, "the victim's payment recorded", func() bool {
		_, done, _ := w.callOf(t, sess, "r-1")
		return done
	})
	ctx := context.Background()
	if a, ok, err := w.admin.Answers().FindAnswerFor(ctx, victim); err != nil || ok {
		t.Fatalf("the victim's request, which ran, is answered %+v (%v): the attacker's refusal taken for its answer", a, err)
	}
	if a, ok, err := w.admin.Answers().FindAnswerFor(ctx, attack); err != nil || !ok || a.Code != schema.CodeUnknownTool || a.RequestDigest != stream.RequestDigestHex(attack) {
		t.Fatalf("the attacker's answer %+v (found %v, %v), want unknown_tool under its own digest", a, ok, err)
	}
	if l.charged("victim") != 1 {
		t.Fatalf("victim charged %d times, want 1", l.charged("victim"))
	}
}
