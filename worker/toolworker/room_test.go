package toolworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// padEcho is an echo tool whose output (its arguments) may take up to
// 32 KiB: what an agent fills a session with.
func padEcho() worker.Tool {
	return worker.Tool{
		Metadata:    effect.Metadata{Name: "echo"}.WithEffect(effect.ReadOnly, "echo-v1"),
		OutputLimit: 32 << 10,
		Body: func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			return req.Arguments, nil
		},
	}
}

// room returns how many bytes ordinary appends may still add to the
// session log, as a writer opening it now measures them.
func (w *roleWorld) room(t *testing.T, session string) int64 {
	t.Helper()
	l, err := w.admin.Logs().OpenLog(context.Background(), session, "measure", schema.MaxEpoch)
	if err != nil {
		t.Fatal(err)
	}
	_, b := l.Room()
	return b
}

// fill fills the session with an agent's echo requests until a few KiB
// are left, or until even its smallest request is refused for want of
// room (history_too_large).
func (w *roleWorld) fill(t *testing.T, sess string) {
	t.Helper()
	small := false
	for i := 0; ; i++ {
		room := w.room(t, sess)
		if room <= 4000 {
			return
		}
		pad := min((room-2500-800)/2, 30000)
		if pad < 16 || small {
			pad = 16
		}
		q := schema.Request{V: 1, RequestID: fmt.Sprintf("fill-%d", i), Session: sess, Task: "t-fill", Tool: "echo",
			Arguments: json.RawMessage(`{"pad":"` + strings.Repeat("p", int(pad)) + `"}`)}
		w.publishAs(t, q, contentMsgID(t, q))
		var refused bool
		streamtest.Eventually(t, 20*time.Second, "fill request "+q.RequestID+" handled", func() bool {
			if _, ok := w.answer(t, sess, q.RequestID); ok {
				refused = true
				return true
			}
			_, done, _ := w.callOf(t, sess, q.RequestID)
			return done
		})
		if refused {
			if a, _ := w.answer(t, sess, q.RequestID); a.Code != schema.CodeHistoryTooLarge {
				t.Fatalf("fill request %s answered %+v", q.RequestID, a)
			}
			if small {
				return
			}
			small = true
		}
	}
}

// TestNoCallLeftOpenAfterItsEffect: an agent fills another agent's
// session (its own echo requests, published with the agent credentials)
// to within a few KiB of the session's byte limit. The victim's payment
// then must either be refused before it runs (history_too_large on
// jw.answers, nothing charged) or, once it ran, have its result on the
// log. Before, the payment recorded its call and start, charged, and
// could not record its 8 KiB receipt: the call stayed open under the
// live worker, neither answered nor assessed.
func TestNoCallLeftOpenAfterItsEffect(t *testing.T) {
	w := startRoles(t, stream.TopologyConfig{LeaseTTL: time.Second, Limits: schema.Limits{MaxBytes: 128 << 10}})
	l := ledger{receipt: 8 << 10}
	start(t, toolworker.Config{Topology: w.worker, Registry: registry(t, padEcho(), l.tool(16<<10)), PollInterval: 50 * time.Millisecond, DisableGateway: true})
	const sess = "s-victim"

	w.fill(t, sess)
	t.Logf("room left for ordinary appends: %d bytes", w.room(t, sess))

	pay := schema.Request{V: 1, RequestID: "pay-1", Session: sess, Task: "t-pay", Tool: "payments.charge", Arguments: json.RawMessage(`{"account":"victim","amount":5}`)}
	w.publishAs(t, pay, contentMsgID(t, pay))
	streamtest.Eventually(t, 20*time.Second, "the payment answered or finished", func() bool {
		if _, ok := w.answer(t, sess, "pay-1"); ok {
			return true
		}
		_, done, _ := w.callOf(t, sess, "pay-1")
		return done
	})
	c, done, _ := w.callOf(t, sess, "pay-1")
	a, answered := w.answer(t, sess, "pay-1")
	switch {
	case answered && (a.Code != schema.CodeHistoryTooLarge || c != nil || l.charged("victim") != 0):
		t.Fatalf("payment answered %+v with call %+v and %d charges", a, c, l.charged("victim"))
	case !answered && (!done || l.charged("victim") != 1):
		t.Fatalf("payment call %+v done %v, %d charges", c, done, l.charged("victim"))
	}
}

// TestCorruptEpochAnswered: with the worker credential, a session.fenced
// event at epoch 2^53 (over the 2^53-1 every reader reads exactly) is
// appended to a session log, and one at 2^53-1 by another owner to
// another (no writer can ever fence above it). Neither log can be written
// again: the sessions' requests must be answered corrupt_history, not
// held and retried forever.
func TestCorruptEpochAnswered(t *testing.T) {
	w := startRoles(t, stream.TopologyConfig{LeaseTTL: time.Second})
	start(t, toolworker.Config{Topology: w.worker, Registry: registry(t, padEcho()), PollInterval: 50 * time.Millisecond, DisableGateway: true})
	for sess, epoch := range map[string]uint64{"s-over": 1 << 53, "s-at": schema.MaxEpoch} {
		fence := fmt.Sprintf(`{"v":1,"session":%q,"epoch":%d,"at":"2026-12-01T00:00:00Z","type":"session.fenced","fence":{"epoch":%d,"owner":"mallory"}}`, sess, epoch, epoch)
		if _, err := w.worker.JS.Publish(context.Background(), w.worker.Names().EventsSubject(sess), []byte(fence)); err != nil {
			t.Fatalf("the worker credential appends: %v", err)
		}
		q := schema.Request{V: 1, RequestID: "r-1", Session: sess, Task: "t-1", Tool: "echo", Arguments: json.RawMessage(`{"n":1}`)}
		w.publishAs(t, q, contentMsgID(t, q))
	}
	for _, sess := range []string{"s-over", "s-at"} {
		streamtest.Eventually(t, 20*time.Second, "the request of "+sess+" answered", func() bool {
			_, ok := w.answer(t, sess, "r-1")
			return ok
		})
		if a, _ := w.answer(t, sess, "r-1"); a.Code != schema.CodeCorruptHistory {
			t.Fatalf("%s: answer %+v, want %s", sess, a, schema.CodeCorruptHistory)
		}
	}
}

// TestPlanForFullSessionHoldsNoRequest: a retry plan issued for a session
// whose log has no room for the attempt (prepare counted events only) is
// delivered to the session's owner, which refuses to spend it. The plan
// must not hold the session's queue: an agent's request behind it is
// answered history_too_large, not held (its caller seeing
// result_pending) while the plan is tried again every few seconds.
func TestPlanForFullSessionHoldsNoRequest(t *testing.T) {
	w := startRoles(t, stream.TopologyConfig{LeaseTTL: time.Second, Limits: schema.Limits{MaxBytes: 128 << 10}})
	start(t, toolworker.Config{Topology: w.worker, Registry: registry(t, padEcho()), PollInterval: 50 * time.Millisecond, DisableGateway: true, PlanRetryDelay: 100 * time.Millisecond})
	const sess = "s-full"
	w.fill(t, sess)
	first, _, _ := w.callOf(t, sess, "fill-0")
	ctx := context.Background()
	h, err := w.admin.Logs().Load(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	var priorSeq uint64
	for _, ev := range h {
		if ev.Call != nil && ev.Call.CallID == first.CallID {
			priorSeq = ev.Seq
		}
	}
	digest, err := schema.ArgsDigest(first.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	plan := signPlan(t, schema.Plan{V: 1, PlanID: "p-full", Session: sess, Task: first.Operation.Task, Tool: first.Tool, Arguments: first.Arguments, ArgsDigest: digest,
		Contract: first.Operation.Contract, Key: first.Operation.Key, PriorCallID: first.CallID, PriorSeq: priorSeq, Basis: schema.BasisNotStarted, IssuedAt: time.Now().UTC()})
	if _, err := stream.NewPlans(w.admin.PlanBucket).Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(plan)
	if _, err := w.admin.JS.Publish(ctx, w.admin.Names().PlansSubject(sess), pb); err != nil {
		t.Fatal(err)
	}
	cons, err := w.admin.PlanLog.Consumer(ctx, w.admin.Names().PlanConsumerName(w.admin.Names().PartitionOf(sess)))
	if err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 20*time.Second, "the plan delivered", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.Delivered.Stream >= 1
	})
	q := schema.Request{V: 1, RequestID: "r-after", Session: sess, Task: "t-1", Tool: "echo", Arguments: json.RawMessage(`{"n":1}`)}
	w.publishAs(t, q, contentMsgID(t, q))
	streamtest.Eventually(t, 20*time.Second, "the request behind the plan answered", func() bool {
		_, ok := w.answer(t, sess, q.RequestID)
		return ok
	})
	if a, _ := w.answer(t, sess, q.RequestID); a.Code != schema.CodeHistoryTooLarge {
		t.Fatalf("answer %+v, want %s", a, schema.CodeHistoryTooLarge)
	}
	if rec, err := stream.NewPlans(w.admin.PlanBucket).Get(ctx, plan.PlanID); err != nil || rec.State == stream.PlanConsumed {
		t.Fatalf("plan record %+v %v: spent on an attempt the log had no room for", rec, err)
	}
}
