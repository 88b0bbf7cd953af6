package toolworker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

type approvalRig struct {
	topo    *stream.Topology
	kp      nkeys.KeyPair
	trusted recovery.TrustedKeys
	runs    atomic.Int32
	reg     *worker.Registry
}

func newApprovalRig(t *testing.T, timeout time.Duration) *approvalRig {
	t.Helper()
	r := &approvalRig{topo: setup(t)}
	r.kp, _ = nkeys.CreateUser()
	pub, _ := r.kp.PublicKey()
	r.trusted, _ = recovery.NewTrustedKeys(pub)
	r.reg = registry(t, worker.Tool{
		Metadata: effect.Metadata{Name: "pay"}.WithEffect(effect.NonIdempotent, "pay-v1"),
		Approval: &worker.ApprovalRule{Timeout: timeout},
		Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			r.runs.Add(1)
			return json.RawMessage(`{"charged":true}`), nil
		},
	})
	return r
}

func (r *approvalRig) config(owner string) toolworker.Config {
	return toolworker.Config{Topology: r.topo, Registry: r.reg, Owner: owner, IdleTimeout: 300 * time.Millisecond,
		PollInterval: 100 * time.Millisecond, Runtime: worker.Config{TrustedApprovers: r.trusted}}
}

func (r *approvalRig) start(t *testing.T, owner string) *running { return start(t, r.config(owner)) }

// startOnce runs a worker the test stops itself (stop returns once Run did).
func (r *approvalRig) startOnce(t *testing.T, owner string) (w *toolworker.Worker, stop func()) {
	t.Helper()
	cfg := r.config(owner)
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	w, err := toolworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return w, stop
}

func (r *approvalRig) answer(t *testing.T, session, callID string, d schema.ApprovalDecision, kp nkeys.KeyPair) {
	t.Helper()
	a, err := recovery.SignApproval(kp, schema.Approval{V: 1, Session: session, CallID: callID, Decision: d, Approver: "alice@ops"})
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.PublishApproval(context.Background(), r.topo.JS, "", a); err != nil {
		t.Fatal(err)
	}
}

// waitingCall waits for the call of session to wait for approval and
// returns its id.
func waitingCall(t *testing.T, topo *stream.Topology, session string) string {
	t.Helper()
	var id string
	streamtest.Eventually(t, 10*time.Second, "a call waits for approval", func() bool {
		p := recovery.ApprovalsOf(history(t, topo, session)).Pending
		if len(p) == 1 {
			id = p[0].CallID
		}
		return id != ""
	})
	return id
}

func resultOf(t *testing.T, topo *stream.Topology, session, callID string) *schema.Result {
	for _, ev := range history(t, topo, session) {
		if ev.Result != nil && ev.Result.CallID == callID {
			return ev.Result
		}
	}
	return nil
}

// TestWorkerApprovalAcrossOwners: a call waits for approval without its
// worker holding anything for it (the worker gives the idle session back
// only once nothing waits); its request is published on JW_APPROVALS; the
// worker stops while the call waits; the approval is given while no
// worker owns the session; a new worker takes the session and runs the
// body exactly once. A forged answer before it changes nothing.
func TestWorkerApprovalAcrossOwners(t *testing.T) {
	r := newApprovalRig(t, time.Minute)
	a, stopA := r.startOnce(t, "tw-a")
	publish(t, r.topo, "s-ap", "r-1", "pay", `{"amount":5000}`)
	callID := waitingCall(t, r.topo, "s-ap")
	start0 := time.Now()
	// The request for approvers.
	streamtest.Eventually(t, 5*time.Second, "approval request published", func() bool {
		m, err := r.topo.ApprovalLog.GetLastMsgForSubject(context.Background(), r.topo.Names().ApprovalRequestsSubject("s-ap"))
		if err != nil {
			return false
		}
		var asked schema.AskedApproval
		return json.Unmarshal(m.Data, &asked) == nil && asked.CallID == callID && asked.Tool == "pay"
	})
	// Past the idle timeout (300 ms), the session is still owned.
	streamtest.Eventually(t, 5*time.Second, "idle timeout passed", func() bool { return time.Since(start0) > time.Second })
	if len(a.Owned()) != 1 {
		t.Fatalf("a waiting session was given back: %v", a.Owned())
	}
	stopA()
	stranger, _ := nkeys.CreateUser()
	r.answer(t, "s-ap", callID, schema.Approved, stranger) // forged: refused, nothing fenced
	r.answer(t, "s-ap", callID, schema.Approved, r.kp)
	r.start(t, "tw-b")
	streamtest.Eventually(t, 15*time.Second, "the approved call ran", func() bool {
		res := resultOf(t, r.topo, "s-ap", callID)
		return res != nil && res.Status == schema.StatusOK
	})
	// Replay the approval: nothing more runs.
	r.answer(t, "s-ap", callID, schema.Approved, r.kp)
	publish(t, r.topo, "s-ap", "r-2", "pay", `{"amount":1}`) // something after it, so the replay is surely handled
	waitingCall(t, r.topo, "s-ap")
	if n := r.runs.Load(); n != 1 {
		t.Fatalf("body ran %d times, want 1", n)
	}
	granted := 0
	for _, ev := range history(t, r.topo, "s-ap") {
		if ev.Type == schema.TypeApprovalGranted {
			granted++
		}
	}
	if granted != 1 {
		t.Fatalf("%d approval.granted events", granted)
	}
}

// TestWorkerApprovalDeniedAndTimeout: a denial ends the call rejected at
// approval; a call nobody answers ends so at its deadline, by the owner's
// timer; the bodies never run.
func TestWorkerApprovalDeniedAndTimeout(t *testing.T) {
	r := newApprovalRig(t, 2*time.Second)
	r.start(t, "tw-a")
	publish(t, r.topo, "s-d", "r-1", "pay", `{}`)
	denied := waitingCall(t, r.topo, "s-d")
	r.answer(t, "s-d", denied, schema.Denied, r.kp)
	publish(t, r.topo, "s-t", "r-1", "pay", `{}`)
	timedOut := waitingCall(t, r.topo, "s-t")
	for _, c := range []struct{ session, call string }{{"s-d", denied}, {"s-t", timedOut}} {
		streamtest.Eventually(t, 15*time.Second, c.session+" rejected at approval", func() bool {
			res := resultOf(t, r.topo, c.session, c.call)
			return res != nil && res.Status == schema.StatusRejected && res.Stage == schema.StageApproval
		})
	}
	if r.runs.Load() != 0 {
		t.Fatalf("bodies ran %d times", r.runs.Load())
	}
}
