package test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// approvalStack is jingwei serve (server, roles, recovery worker; no tool
// worker) plus an approver key the tool worker processes trust.
type approvalStack struct {
	t        *testing.T
	bin, url string
	auth     string
	keyFile  string // approver seed
	trust    string // trusted approvers file
	kp       nkeys.KeyPair
	topo     *stream.Topology // admin: reads everything
	agentJS  jetstream.JetStream
	reviewJS jetstream.JetStream // the approver's role
	host     *service.Client
	tools    *tools.Tools
	procs    *processes
}

func newApprovalStack(t *testing.T) *approvalStack {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	s := &approvalStack{t: t, bin: buildJingwei(t)}
	s.kp, _ = nkeys.CreateUser()
	seed, _ := s.kp.Seed()
	pub, _ := s.kp.PublicKey()
	dir := t.TempDir()
	s.keyFile, s.trust = filepath.Join(dir, "approver.nk"), filepath.Join(dir, "approvers")
	if err := os.WriteFile(s.keyFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.trust, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, s.bin, "--no-worker", "--no-prober", "--lease-ttl", pipelineLeaseTTL)
	s.url, s.auth = srv.url, srv.auth()
	ctx := context.Background()
	connect := func(r access.Role) (*nats.Conn, jetstream.JetStream) {
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: s.url, NKeySeedFile: access.KeyDir(s.auth).SeedFile(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		return nc, js
	}
	_, js := connect(access.RoleAdmin)
	var err error
	if s.topo, err = stream.OpenTopology(ctx, js, stream.TopologyConfig{}); err != nil {
		t.Fatal(err)
	}
	if s.tools, err = tools.New(ctx, tools.Config{JS: js}); err != nil {
		t.Fatal(err)
	}
	_, s.agentJS = connect(access.RoleAgent)
	_, s.reviewJS = connect(access.RoleReviewer)
	hostNC, _ := connect(access.RoleHost)
	s.host = service.NewClient(hostNC, service.ClientConfig{Timeout: 20 * time.Second})
	s.procs = &processes{t: t, bin: s.bin, dir: t.TempDir()}
	t.Cleanup(s.procs.killAll)
	return s
}

// worker starts a tool worker process with the given approval rules.
func (s *approvalStack) worker(name string, extra ...string) *process {
	args := append([]string{"worker", "--server", s.url, "--auth", s.auth, "--owner", name, "--lease-ttl", pipelineLeaseTTL,
		"--trust-approvers", s.trust, "--idle", "2s"}, extra...)
	return s.procs.start(name, args...)
}

// answer runs `jingwei approve|deny` as the approver.
func (s *approvalStack) answer(verb, session, callID string, extra ...string) {
	s.t.Helper()
	args := append([]string{verb, "--server", s.url, "--auth", s.auth, "--session", session, "--call", callID,
		"--approver", "alice@finance", "--reason", "ticket-77", "--key", s.keyFile, "--json"}, extra...)
	out, err := exec.Command(s.bin, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("jingwei %s: %v\n%s", verb, err, out)
	}
}

// replay publishes a signed approval of callID again, under a new Msg-Id
// (so JetStream stores it): a worker must refuse it.
func (s *approvalStack) replay(session, callID string) {
	s.t.Helper()
	a, err := recovery.SignApproval(s.kp, schema.Approval{V: 1, Session: session, CallID: callID, Decision: schema.Approved, Approver: "alice@finance"})
	if err != nil {
		s.t.Fatal(err)
	}
	b, _ := json.Marshal(a)
	if _, err := s.reviewJS.Publish(context.Background(), stream.ApprovalsSubject("", session), b, jetstream.WithMsgID("replay-"+callID+time.Now().String())); err != nil {
		s.t.Fatal(err)
	}
}

// waiting waits until a call of session waits for approval (not one of
// except) and returns it.
func (s *approvalStack) waiting(session string, except ...string) string {
	s.t.Helper()
	var id string
	streamtest.Eventually(s.t, waitLimit, session+": a call waits for approval", func() bool {
		for _, p := range recovery.ApprovalsOf(sessionEvents(s.t, s.topo, session)).Pending {
			if !contains(except, p.CallID) {
				id = p.CallID
				return true
			}
		}
		return false
	})
	return id
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func (s *approvalStack) result(session, callID string) *schema.Result {
	for _, ev := range sessionEvents(s.t, s.topo, session) {
		if ev.Result != nil && ev.Result.CallID == callID {
			return ev.Result
		}
	}
	return nil
}

func (s *approvalStack) waitResult(session, callID string) *schema.Result {
	s.t.Helper()
	var r *schema.Result
	streamtest.Eventually(s.t, waitLimit, session+"/"+callID+" has a result", func() bool {
		r = s.result(session, callID)
		return r != nil
	})
	return r
}

func (s *approvalStack) count(session, typ, callID string) int {
	n := 0
	for _, ev := range sessionEvents(s.t, s.topo, session) {
		if ev.Type == typ && (callID == "" || ev.CallID() == callID) {
			n++
		}
	}
	return n
}

// leaseGone waits until nobody owns session.
func (s *approvalStack) leaseGone(session string) {
	s.t.Helper()
	streamtest.Eventually(s.t, waitLimit, session+": lease expired", func() bool {
		_, err := s.topo.LeaseBucket.Get(context.Background(), session)
		return err != nil
	})
}

// TestApprovalSurvivesWorkerCrash is the crash-while-waiting test
// through real processes: a tool worker is SIGKILLed while two payments
// wait for approval; with no worker running (the recovery worker meanwhile
// takes the sessions over: the waiting calls survive its fence), one is
// approved and one denied with the CLI; a new worker takes the sessions
// and runs the approved body exactly once and the denied one never; a
// replayed approval runs nothing.
func TestApprovalSurvivesWorkerCrash(t *testing.T) {
	s := newApprovalStack(t)
	a := s.worker("tw-a", "--require-approval", "payments.charge:amount_cents>1000")
	publishRequest(t, s.agentJS, s.topo, "pay-ok", "r-1", tools.PaymentsCharge, `{"account":"acct-ok","amount_cents":500000}`)
	publishRequest(t, s.agentJS, s.topo, "pay-no", "r-1", tools.PaymentsCharge, `{"account":"acct-no","amount_cents":900000}`)
	okCall, noCall := s.waiting("pay-ok"), s.waiting("pay-no")
	a.kill()
	s.leaseGone("pay-ok")
	s.leaseGone("pay-no")

	// No tool worker runs: the answers are only published (--wait 0),
	// and judged by the next worker.
	s.answer("approve", "pay-ok", okCall, "--wait", "0")
	s.answer("deny", "pay-no", noCall, "--wait", "0")
	s.worker("tw-b", "--require-approval", "payments.charge:amount_cents>1000")

	if r := s.waitResult("pay-ok", okCall); r.Status != schema.StatusOK {
		t.Fatalf("approved payment: %+v", r)
	}
	if r := s.waitResult("pay-no", noCall); r.Status != schema.StatusRejected || r.Stage != schema.StageApproval {
		t.Fatalf("denied payment: %+v", r)
	}
	s.replay("pay-ok", okCall)
	// A later call on the session, after the replay: once it is done the
	// replay was handled.
	publishRequest(t, s.agentJS, s.topo, "pay-ok", "r-2", tools.PaymentsCharge, `{"account":"acct-small","amount_cents":5}`)
	streamtest.Eventually(t, waitLimit, "the small payment ran", func() bool {
		c := callsWithRequest(t, s.topo, "pay-ok", "r-2")
		return len(c) == 1 && resultFor(t, s.topo, "pay-ok", c[0].CallID)
	})
	led, err := s.tools.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byAccount := map[string]int{}
	for _, e := range led {
		byAccount[e.Account]++
	}
	if byAccount["acct-ok"] != 1 || byAccount["acct-no"] != 0 || byAccount["acct-small"] != 1 {
		t.Fatalf("ledger: %v", byAccount)
	}
	if n := s.count("pay-ok", schema.TypeStarted, okCall); n != 1 {
		t.Fatalf("approved call started %d times", n)
	}
	if n := s.count("pay-ok", schema.TypeApprovalGranted, okCall); n != 1 {
		t.Fatalf("approval honoured %d times", n)
	}
	if n := s.count("pay-no", schema.TypeStarted, ""); n != 0 {
		t.Fatalf("denied call started")
	}
	if n := s.count("pay-ok", schema.TypeCall, ""); n != 2 {
		t.Fatalf("%d calls recorded, want 2 (no call asked again as new)", n)
	}
}

// TestApprovedPaymentCrashAfterStart: a payment is approved and its body
// has booked the charge when the worker is SIGKILLed (after tool.started):
// the call is uncertain and needs_review, and the old approval — replayed
// — never runs it again; prepare refuses without a review.
func TestApprovedPaymentCrashAfterStart(t *testing.T) {
	s := newApprovalStack(t)
	a := s.worker("tw-a", "--require-approval", "payments.charge", "--tool-delay-after", "1m")
	publishRequest(t, s.agentJS, s.topo, "pay-1", "r-1", tools.PaymentsCharge, `{"account":"acct-1","amount_cents":700000}`)
	call := s.waiting("pay-1")
	s.answer("approve", "pay-1", call)
	streamtest.Eventually(t, waitLimit, "the charge is booked", func() bool {
		led, err := s.tools.Ledger(context.Background())
		return err == nil && len(led) == 1 && s.count("pay-1", schema.TypeStarted, call) == 1
	})
	a.kill()
	s.leaseGone("pay-1")
	s.worker("tw-b", "--require-approval", "payments.charge")
	ctx := context.Background()
	var as schema.Assessment
	streamtest.Eventually(t, waitLimit, "the crashed payment is assessed", func() bool {
		var err error
		as, err = s.host.Inspect(ctx, "pay-1", call)
		return err == nil && as.Outcome == schema.OutcomeUncertain
	})
	if as.Decision != schema.DecisionNeedsReview || as.Evidence != "no_result" {
		t.Fatalf("assessment: %+v", as)
	}
	s.replay("pay-1", call)
	var perr error
	streamtest.Eventually(t, waitLimit, "prepare is refused needs_review", func() bool {
		_, perr = s.host.Prepare(ctx, "pay-1", call)
		return schema.CodeOf(perr) != schema.CodeNotConfirmed
	})
	if schema.CodeOf(perr) != schema.CodeNeedsReview {
		t.Fatalf("prepare: %v, want needs_review", perr)
	}
	// Something after the replay on the session, to know it was handled.
	publishRequest(t, s.agentJS, s.topo, "pay-1", "r-2", tools.CatalogLookup, `{"sku":"A-1"}`)
	streamtest.Eventually(t, waitLimit, "the lookup ran", func() bool {
		c := callsWithRequest(t, s.topo, "pay-1", "r-2")
		return len(c) == 1 && resultFor(t, s.topo, "pay-1", c[0].CallID)
	})
	led, _ := s.tools.Ledger(ctx)
	if len(led) != 1 || s.count("pay-1", schema.TypeStarted, call) != 1 || s.result("pay-1", call) != nil {
		t.Fatalf("ledger %d entries, started %d, result %+v", len(led), s.count("pay-1", schema.TypeStarted, call), s.result("pay-1", call))
	}
}

// TestReferenceApprovalScenario is the reference scenario through real
// processes: an idempotent orders.create (every call needs approval)
// writes its record and then fails; the host prepares a plan; the first
// retry is denied by the approver; the host prepares again from the latest
// evidence (rejected at approval: not_started); the second retry is
// approved and runs. Three attempts in the log, tool_calls = 3, exactly one
// order record.
func TestReferenceApprovalScenario(t *testing.T) {
	s := newApprovalStack(t)
	s.worker("tw-a", "--require-approval", "orders.create", "--fail-after-write", "1")
	ctx := context.Background()
	const sess = "ref-1"
	publishRequest(t, s.agentJS, s.topo, sess, "r-1", tools.OrdersCreate, `{"sku":"A-1","qty":1,"customer":"c-1"}`)
	c1 := s.waiting(sess)
	s.answer("approve", sess, c1)
	if r := s.waitResult(sess, c1); r.Status != schema.StatusFailed {
		t.Fatalf("first attempt: %+v", r)
	}
	p1, err := s.host.Prepare(ctx, sess, c1)
	if err != nil || p1.Basis != schema.BasisUncertainSafe {
		t.Fatalf("first prepare: %+v, %v", p1, err)
	}
	c2 := s.waiting(sess, c1)
	// The first attempt's approval does not answer the retry.
	s.replay(sess, c1)
	s.answer("deny", sess, c2)
	if r := s.waitResult(sess, c2); r.Status != schema.StatusRejected || r.Stage != schema.StageApproval {
		t.Fatalf("first retry: %+v", r)
	}
	p2, err := s.host.Prepare(ctx, sess, c2)
	if err != nil || p2.Basis != schema.BasisNotStarted || p2.Key != p1.Key {
		t.Fatalf("second prepare: %+v, %v", p2, err)
	}
	c3 := s.waiting(sess, c1, c2)
	s.answer("approve", sess, c3)
	if r := s.waitResult(sess, c3); r.Status != schema.StatusOK {
		t.Fatalf("second retry: %+v", r)
	}
	if n := s.count(sess, schema.TypeCall, ""); n != 3 {
		t.Fatalf("%d attempts in the log, want 3", n)
	}
	// Counts of a task without a limit are written within the flush
	// interval (50 ms): poll.
	var u stream.Usage
	streamtest.Eventually(t, 10*time.Second, "tool_calls = 3", func() bool {
		var err error
		u, err = stream.NewBudget(s.topo.Budget).Get(ctx, sess, "default")
		return err == nil && u.ToolCalls >= 3
	})
	if u.ToolCalls != 3 {
		t.Fatalf("tool_calls %+v, want 3", u)
	}
	orders, err := s.tools.Orders(ctx)
	if err != nil || len(orders) != 1 {
		t.Fatalf("orders %v, %v; want exactly one", orders, err)
	}
	a, err := s.host.Inspect(ctx, sess, c3)
	if err != nil || a.Outcome != schema.OutcomeCompleted || a.Attempts != 3 || strings.Join(a.Chain, ",") != c1+","+c2+","+c3 {
		t.Fatalf("assessment %+v, %v", a, err)
	}
}

// TestTaskStopThroughPipeline: `jingwei status` lists a call waiting for
// approval; `jingwei task stop` (host role) makes the session's tool
// worker record task.stopped; the waiting call ends rejected at approval;
// a new request of the task is answered task_stopped without a call;
// prepare refuses the task's failed call with task_stopped; tool_calls is
// never lowered; status lists the stopped task.
func TestTaskStopThroughPipeline(t *testing.T) {
	s := newApprovalStack(t)
	s.worker("tw-a", "--require-approval", "payments.charge:amount_cents>1000", "--fail-after-write", "1")
	ctx := context.Background()
	const sess = "stop-1"
	publishRequest(t, s.agentJS, s.topo, sess, "r-1", tools.OrdersCreate, `{"sku":"A-1","qty":1,"customer":"c-1"}`)
	streamtest.Eventually(t, waitLimit, "the order call failed", func() bool {
		c := callsWithRequest(t, s.topo, sess, "r-1")
		return len(c) == 1 && resultFor(t, s.topo, sess, c[0].CallID)
	})
	failed := callsWithRequest(t, s.topo, sess, "r-1")[0].CallID
	publishRequest(t, s.agentJS, s.topo, sess, "r-2", tools.PaymentsCharge, `{"account":"acct-1","amount_cents":900000}`)
	pay := s.waiting(sess)

	out, err := exec.Command(s.bin, "status", "--server", s.url, "--auth", s.auth, "--session", sess, "--json").Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st struct {
		service.Status `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st.AwaitingApproval) != 1 || st.AwaitingApproval[0].CallID != pay {
		t.Fatalf("status: %s (%v)", out, err)
	}
	text, _ := exec.Command(s.bin, "status", "--server", s.url, "--auth", s.auth, "--session", sess).Output()
	if !strings.Contains(string(text), "AWAITING APPROVAL (1)") || !strings.Contains(string(text), pay) {
		t.Fatalf("status text:\n%s", text)
	}

	var before stream.Usage
	streamtest.Eventually(t, 10*time.Second, "tool_calls = 2", func() bool {
		before, err = stream.NewBudget(s.topo.Budget).Get(ctx, sess, "default")
		return err == nil && before.ToolCalls == 2
	})
	if out, err := exec.Command(s.bin, "task", "stop", "--server", s.url, "--auth", s.auth, "--session", sess, "--task", "default", "--reason", "runaway agent").CombinedOutput(); err != nil {
		t.Fatalf("task stop: %v\n%s", err, out)
	}
	if r := s.waitResult(sess, pay); r.Status != schema.StatusRejected || r.Stage != schema.StageApproval {
		t.Fatalf("waiting payment after the stop: %+v", r)
	}
	if n := s.count(sess, schema.TypeTaskStopped, ""); n != 1 {
		t.Fatalf("%d task.stopped events", n)
	}
	publishRequest(t, s.agentJS, s.topo, sess, "r-3", tools.CatalogLookup, `{"sku":"A-1"}`)
	var ans schema.Answer
	streamtest.Eventually(t, waitLimit, "the request after the stop is answered", func() bool {
		a, ok, err := s.topo.Answers().FindAnswer(ctx, sess, "r-3")
		ans = a
		return err == nil && ok
	})
	if ans.Code != schema.CodeTaskStopped || len(callsWithRequest(t, s.topo, sess, "r-3")) != 0 {
		t.Fatalf("answer %+v", ans)
	}
	if _, err := s.host.Prepare(ctx, sess, failed); schema.CodeOf(err) != schema.CodeTaskStopped {
		t.Fatalf("prepare of the stopped task's call: %v", err)
	}
	after, err := stream.NewBudget(s.topo.Budget).Get(ctx, sess, "default")
	if err != nil || after.ToolCalls != before.ToolCalls {
		t.Fatalf("tool_calls %d before the stop, %d after (%v): never restored, nothing more counted", before.ToolCalls, after.ToolCalls, err)
	}
	hst, err := s.host.Status(ctx, service.StatusRequest{Session: sess})
	if err != nil || len(hst.StoppedTasks) != 1 || hst.StoppedTasks[0].Task != "default" || hst.StoppedTasks[0].By != schema.StoppedByHost || len(hst.AwaitingApproval) != 0 {
		t.Fatalf("status after the stop: %+v, %v", hst, err)
	}
}
