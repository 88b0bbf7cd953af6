package toolworker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// deadlineOf returns the deadline recorded for callID's approval.
func deadlineOf(t *testing.T, topo *stream.Topology, session, callID string) time.Time {
	t.Helper()
	for _, ev := range history(t, topo, session) {
		if ev.ApprovalRequest != nil && ev.ApprovalRequest.CallID == callID {
			return ev.ApprovalRequest.Deadline
		}
	}
	t.Fatalf("no approval.requested for %s/%s", session, callID)
	return time.Time{}
}

// TestWaitingCallsResumedAfterCrash: worker A parks calls waiting for
// approval and crashes (its connection closed: no drain, its partition
// leases left to expire). Worker B takes the partitions and nothing else
// is published for the sessions: a call whose deadline passed while
// nobody owned it ends rejected at approval when B takes it; one whose
// deadline comes after B took it ends so by B's timer, after the
// deadline; one whose approval was published while nobody owned it runs
// once; a session whose call A had already answered is not touched (no
// fence).
func TestWaitingCallsResumedAfterCrash(t *testing.T) {
	emb, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)
	var runs atomic.Int32
	tool := func(name string, timeout time.Duration) worker.Tool {
		return worker.Tool{
			Metadata: effect.Metadata{Name: name}.WithEffect(effect.NonIdempotent, name+"-v1"),
			Approval: &worker.ApprovalRule{Timeout: timeout},
			Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
				runs.Add(1)
				return json.RawMessage(`{"charged":true}`), nil
			},
		}
	}
	reg := registry(t, tool("pay", time.Minute), tool("soon", 8*time.Second), tool("quick", 3*time.Second))
	config := resumeConfig(t, reg, trusted)
	answer := func(session, callID string, d schema.ApprovalDecision) {
		t.Helper()
		publishAnswer(t, topo, kp, session, callID, d)
	}

	// Worker A on a connection of its own, so that it can die alone.
	crashA := startAlone(t, emb, topo, func(tp *stream.Topology) toolworker.Config { return config("tw-a", tp) })

	publish(t, topo, "s-ok", "r-1", "pay", `{}`)
	publish(t, topo, "s-soon", "r-1", "soon", `{}`)
	publish(t, topo, "s-quick", "r-1", "quick", `{}`)
	publish(t, topo, "s-done", "r-1", "pay", `{}`)
	okCall := waitingCall(t, topo, "s-ok")
	soonCall := waitingCall(t, topo, "s-soon")
	quickCall := waitingCall(t, topo, "s-quick")
	doneCall := waitingCall(t, topo, "s-done")
	answer("s-done", doneCall, schema.Denied)
	streamtest.Eventually(t, 10*time.Second, "s-done denied by A", func() bool {
		res := resultOf(t, topo, "s-done", doneCall)
		return res != nil && res.Status == schema.StatusRejected
	})
	doneEvents := len(history(t, topo, "s-done"))

	// A dies: nothing of it is drained or released.
	crashA()
	streamtest.Eventually(t, 10*time.Second, "A's leases expired", func() bool { return owners(t, topo)["tw-a"] == 0 })
	answer("s-ok", okCall, schema.Approved) // while nobody owns the session
	quickDeadline := deadlineOf(t, topo, "s-quick", quickCall)
	streamtest.Eventually(t, 10*time.Second, "s-quick's deadline passed", func() bool { return time.Now().After(quickDeadline) })
	if res := resultOf(t, topo, "s-quick", quickCall); res != nil {
		t.Fatalf("s-quick ended while nobody owned it: %+v", res)
	}
	soonDeadline := deadlineOf(t, topo, "s-soon", soonCall)

	b := start(t, config("tw-b", topo))
	for _, c := range []struct{ session, call string }{{"s-quick", quickCall}, {"s-soon", soonCall}} {
		streamtest.Eventually(t, 15*time.Second, c.session+" rejected at approval", func() bool {
			res := resultOf(t, topo, c.session, c.call)
			return res != nil && res.Status == schema.StatusRejected && res.Stage == schema.StageApproval
		})
	}
	for _, ev := range history(t, topo, "s-soon") {
		if ev.Result != nil && ev.Result.CallID == soonCall && ev.At.Before(soonDeadline) {
			t.Fatalf("s-soon rejected at %s, before its deadline %s", ev.At, soonDeadline)
		}
	}
	streamtest.Eventually(t, 15*time.Second, "the approved call ran", func() bool {
		res := resultOf(t, topo, "s-ok", okCall)
		return res != nil && res.Status == schema.StatusOK
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("bodies ran %d times, want 1", n)
	}
	granted := 0
	for _, ev := range history(t, topo, "s-ok") {
		if ev.Type == schema.TypeApprovalGranted {
			granted++
		}
	}
	if granted != 1 {
		t.Fatalf("%d approval.granted events on s-ok", granted)
	}
	// The session whose call A answered was never fenced by B: B owns
	// every partition (its scans run at take), and s-done stays as A left
	// it for a while after.
	streamtest.Eventually(t, 15*time.Second, "B owns every partition", func() bool { return len(b.w.OwnedPartitions()) == topo.Names().Partitions() })
	owned := time.Now()
	streamtest.Eventually(t, 5*time.Second, "a second after B took everything", func() bool {
		if h := history(t, topo, "s-done"); len(h) != doneEvents {
			t.Fatalf("s-done has %d events, had %d before B: %+v", len(h), doneEvents, h[len(h)-1])
		}
		return time.Since(owned) > time.Second
	})
}

// TestAnswerInTimeHonouredAfterCrash: answers given before their calls'
// deadlines while the owner is dead, read by the next owner only after
// the deadlines passed: an approval signed by a trusted key runs the call
// once; one from an untrusted key, and a trusted one published after the
// deadline, do not (those calls end rejected at approval).
func TestAnswerInTimeHonouredAfterCrash(t *testing.T) {
	emb, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)
	stranger, _ := nkeys.CreateUser()
	var runs atomic.Int32
	reg := registry(t, worker.Tool{
		Metadata: effect.Metadata{Name: "pay"}.WithEffect(effect.NonIdempotent, "pay-v1"),
		Approval: &worker.ApprovalRule{Timeout: 3 * time.Second},
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`{"charged":true}`), nil
		},
	})
	config := resumeConfig(t, reg, trusted)
	answer := func(session, callID string, signer nkeys.KeyPair) {
		t.Helper()
		publishAnswer(t, topo, signer, session, callID, schema.Approved)
	}
	crashA := startAlone(t, emb, topo, func(tp *stream.Topology) toolworker.Config { return config("tw-a", tp) })

	for _, s := range []string{"s-in-time", "s-forged", "s-late"} {
		publish(t, topo, s, "r-1", "pay", `{}`)
	}
	inTime, forged, late := waitingCall(t, topo, "s-in-time"), waitingCall(t, topo, "s-forged"), waitingCall(t, topo, "s-late")
	crashA()
	answer("s-in-time", inTime, kp)
	answer("s-forged", forged, stranger)
	if d := deadlineOf(t, topo, "s-in-time", inTime); !time.Now().Before(d) {
		t.Fatalf("the answers were published after the deadline %s; the test needs them before", d)
	}
	lateDeadline := deadlineOf(t, topo, "s-late", late)
	streamtest.Eventually(t, 10*time.Second, "the deadlines passed", func() bool { return time.Now().After(lateDeadline.Add(100 * time.Millisecond)) })
	answer("s-late", late, kp)
	streamtest.Eventually(t, 10*time.Second, "A's leases expired", func() bool { return owners(t, topo)["tw-a"] == 0 })

	start(t, config("tw-b", topo))
	streamtest.Eventually(t, 15*time.Second, "the call answered in time ran", func() bool {
		res := resultOf(t, topo, "s-in-time", inTime)
		return res != nil && res.Status == schema.StatusOK
	})
	for _, c := range []struct{ session, call string }{{"s-forged", forged}, {"s-late", late}} {
		streamtest.Eventually(t, 15*time.Second, c.session+" rejected at approval", func() bool {
			res := resultOf(t, topo, c.session, c.call)
			return res != nil && res.Status == schema.StatusRejected && res.Stage == schema.StageApproval
		})
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("bodies ran %d times, want 1", n)
	}
	for _, s := range []string{"s-in-time", "s-forged", "s-late"} {
		granted := 0
		for _, ev := range history(t, topo, s) {
			if ev.Type == schema.TypeApprovalGranted {
				granted++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[s == "s-in-time"]; granted != want {
			t.Errorf("%s: %d approval.granted, want %d", s, granted, want)
		}
	}
}

// resumeConfig returns the worker configuration of the crash tests, by
// owner and topology (each worker may have a connection of its own).
func resumeConfig(t *testing.T, reg *worker.Registry, trusted recovery.TrustedKeys) func(string, *stream.Topology) toolworker.Config {
	return func(owner string, tp *stream.Topology) toolworker.Config {
		return toolworker.Config{Topology: tp, Registry: reg, Owner: owner, IdleTimeout: 300 * time.Millisecond,
			PollInterval: 100 * time.Millisecond, DrainTimeout: 2 * time.Second, PlanRetryDelay: 100 * time.Millisecond,
			Runtime: worker.Config{TrustedApprovers: trusted},
			Logger:  zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Str("w", owner).Logger()}
	}
}

// startAlone runs a worker on a connection of its own to emb and returns
// its crash: the connection closed, then the worker stopped, so that it
// dies alone (nothing drained, its leases left to expire).
func startAlone(t *testing.T, emb *natsnode.Embedded, topo *stream.Topology, config func(*stream.Topology) toolworker.Config) (crash func()) {
	t.Helper()
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	tp, err := stream.OpenTopology(context.Background(), js, topo.Config())
	if err != nil {
		t.Fatal(err)
	}
	w, err := toolworker.New(config(tp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { nc.Close(); cancel() }
}

// publishAnswer signs an answer to callID with signer and publishes it.
func publishAnswer(t *testing.T, topo *stream.Topology, signer nkeys.KeyPair, session, callID string, d schema.ApprovalDecision) {
	t.Helper()
	a, err := recovery.SignApproval(signer, schema.Approval{V: 1, Session: session, CallID: callID, Decision: d, Approver: "alice@ops"})
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.PublishApproval(context.Background(), topo.JS, "", a); err != nil {
		t.Fatal(err)
	}
}
