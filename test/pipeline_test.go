package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	"github.com/jingwei/jingwei/worker"
)

// pipelineLeaseTTL is the lease TTL of every process in the pipeline test:
// how soon a killed worker's sessions are taken over.
const pipelineLeaseTTL = "2s"

// TestPipelineCrashAndRecovery is the multi-process test: an embedded
// server in the test process, a recovery worker and two tool workers as
// processes of the real binary. The first tool worker is killed (SIGKILL)
// while the bodies of orders.create and payments.charge have done their
// side effect and not yet answered. Then: every order is completed by an
// explicit prepare and the plan's execution, with exactly one order record;
// every payment is needs_review and is never run again until a valid signed
// not_executed review and a prepare; forged reviews (unknown key, bad
// signature, other session) change nothing; a completed review blocks the
// retry; no plan is consumed twice; tool_calls equals the attempts in the
// logs; a request re-published with the same request_id runs at most once.
func TestPipelineCrashAndRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := buildJingwei(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The reviewer key the recovery worker trusts, and one it does not.
	reviewer, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	pub, _ := reviewer.PublicKey()
	trustFile := filepath.Join(t.TempDir(), "trusted-reviewers")
	if err := os.WriteFile(trustFile, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// jingwei serve with authorization on: the server, the role keys and
	// the recovery worker. Every client of the test connects as its role:
	// the agent publishes requests, the reviewer reviews, the host
	// prepares; admin only reads (the business records, the streams).
	srv := startServe(t, bin, "--no-worker", "--no-prober", "--lease-ttl", pipelineLeaseTTL, "--trust-reviewers", trustFile)
	url := srv.url
	auth := srv.auth()
	connect := func(r access.Role) (*nats.Conn, jetstream.JetStream, *stream.Topology) {
		t.Helper()
		nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, NKeySeedFile: access.KeyDir(auth).SeedFile(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{})
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return nc, js, topo
	}
	_, js, topo := connect(access.RoleAdmin)
	_, agentJS, _ := connect(access.RoleAgent)
	_, reviewerJS, _ := connect(access.RoleReviewer)
	hostNC, _, _ := connect(access.RoleHost)
	tl, err := tools.New(ctx, tools.Config{JS: js}) // to read orders and the ledger
	if err != nil {
		t.Fatal(err)
	}

	procs := &processes{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(procs.killAll)
	// Worker A holds every body after its side effect for a minute: killed
	// then, it leaves calls that executed without a result.
	workerA := procs.start("worker-a", "worker", "--server", url, "--auth", auth, "--owner", "tw-a", "--lease-ttl", pipelineLeaseTTL, "--tool-delay-after", "1m")

	orders := []string{"o-1", "o-2", "o-3"}
	payments := []string{"p-1", "p-2", "p-3"}
	all := append(append([]string{}, orders...), payments...)
	first := map[string]string{} // session → request id of its first request
	for i, s := range orders {
		first[s] = "r-" + s + "-1"
		publishRequest(t, agentJS, topo, s, first[s], tools.OrdersCreate, fmt.Sprintf(`{"sku":"A-1","qty":%d,"customer":"c-%d"}`, i+1, i))
	}
	for i, s := range payments {
		first[s] = "r-" + s + "-1"
		publishRequest(t, agentJS, topo, s, first[s], tools.PaymentsCharge, fmt.Sprintf(`{"account":"acct-%d","amount_cents":%d}`, i, 100*(i+1)))
	}

	// Wait until every body has started and done its side effect.
	streamtest.Eventually(t, waitLimit, "all six bodies started with their side effects done", func() bool {
		for _, s := range all {
			if !hasEvent(t, topo, s, schema.TypeStarted) {
				return false
			}
		}
		os, err1 := tl.Orders(ctx)
		led, err2 := tl.Ledger(ctx)
		return err1 == nil && err2 == nil && len(os) == len(orders) && len(led) == len(payments)
	})
	// Worker B joins; the sessions are A's. Each session gets a second
	// request, queued behind A's held body.
	workerB := procs.start("worker-b", "worker", "--server", url, "--auth", auth, "--owner", "tw-b", "--lease-ttl", pipelineLeaseTTL)
	second := map[string]string{}
	for _, s := range all {
		second[s] = "r-" + s + "-2"
		publishRequest(t, agentJS, topo, s, second[s], tools.CatalogLookup, `{"sku":"B-2"}`)
	}

	workerA.kill()

	// B takes the sessions once A's leases expire and runs the queued
	// requests; the re-published requests (one recorded by A before it
	// died, one B ran) are acknowledged and never run again.
	streamtest.Eventually(t, waitLimit, "second requests run", func() bool {
		for _, s := range all {
			if len(callsWithRequest(t, topo, s, second[s])) != 1 || !resultFor(t, topo, s, callsWithRequest(t, topo, s, second[s])[0].CallID) {
				return false
			}
		}
		return true
	})
	publishRequest(t, agentJS, topo, "o-1", first["o-1"], tools.OrdersCreate, `{"sku":"A-1","qty":1,"customer":"c-0"}`)
	publishRequest(t, agentJS, topo, "p-1", first["p-1"], tools.PaymentsCharge, `{"account":"acct-0","amount_cents":100}`)
	publishRequest(t, agentJS, topo, "o-2", second["o-2"], tools.CatalogLookup, `{"sku":"B-2"}`)
	streamtest.Eventually(t, waitLimit, "re-published requests acknowledged", func() bool {
		info, err := topo.Requests.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	for _, s := range all {
		for _, rid := range []string{first[s], second[s]} {
			if n := len(callsWithRequest(t, topo, s, rid)); n != 1 {
				t.Errorf("%s: request %s has %d tool.calls, want 1", s, rid, n)
			}
		}
	}

	// The crashed calls: A's first calls, open (started, no result).
	crashed := map[string]*schema.Call{}
	for _, s := range all {
		cs := callsWithRequest(t, topo, s, first[s])
		if len(cs) != 1 || resultFor(t, topo, s, cs[0].CallID) {
			t.Fatalf("%s: first call %+v should be open", s, cs)
		}
		crashed[s] = cs[0]
	}

	// The recovery worker classified every crashed call: the orders may be
	// retried, the payments need a review.
	streamtest.Eventually(t, waitLimit, "assessments of the crashed calls", func() bool {
		for _, s := range all {
			want := schema.DecisionNeedsReview
			if strings.HasPrefix(s, "o-") {
				want = schema.DecisionRetryAllowed
			}
			a, ok := assessmentOf(t, js, topo, s, crashed[s].CallID)
			if !ok {
				return false
			}
			if a.Outcome != schema.OutcomeUncertain || a.Decision != want {
				t.Fatalf("%s: assessment %+v, want uncertain and %s", s, a, want)
			}
		}
		return true
	})

	api := &apiClient{t: t, nc: hostNC}
	// Orders: an explicit prepare issues a plan (uncertain_safe); worker B
	// executes it; orders.create finds the order A wrote.
	plans := map[string]schema.Plan{}
	for _, s := range orders {
		plan := api.prepareOK(ctx, s, crashed[s].CallID)
		if plan.Basis != schema.BasisUncertainSafe || plan.Key != crashed[s].Operation.Key {
			t.Fatalf("%s: plan %+v", s, plan)
		}
		plans[s] = plan
	}
	// Payments: needs_review, and forged reviews change nothing.
	for _, s := range payments {
		api.prepareRefused(ctx, s, crashed[s].CallID, "needs_review")
	}
	p3 := crashed["p-3"]
	forged := []schema.Review{
		signReview(t, stranger, schema.Review{Session: "p-3", CallID: p3.CallID, Verdict: schema.VerdictNotExecuted}),       // unknown key
		tamper(signReview(t, reviewer, schema.Review{Session: "p-3", CallID: p3.CallID, Verdict: schema.VerdictCompleted})), // bad signature
		signReview(t, reviewer, schema.Review{Session: "p-1", CallID: p3.CallID, Verdict: schema.VerdictNotExecuted}),       // other session
	}
	for _, rv := range forged {
		publishReview(t, reviewerJS, topo, "p-3", rv)
	}
	// The other-session review, published where it claims to belong, names
	// a call that p-1 does not have.
	publishReview(t, reviewerJS, topo, "p-1", forged[2])
	api.prepareRefused(ctx, "p-3", p3.CallID, "needs_review")
	// p-1: a valid not_executed review lifts needs_review.
	publishReview(t, reviewerJS, topo, "p-1", signReview(t, reviewer, schema.Review{Session: "p-1", CallID: crashed["p-1"].CallID, Verdict: schema.VerdictNotExecuted}))
	plans["p-1"] = api.prepareOK(ctx, "p-1", crashed["p-1"].CallID)
	if plans["p-1"].Basis != schema.BasisReviewedNotExecuted {
		t.Fatalf("p-1 plan basis %s", plans["p-1"].Basis)
	}
	// p-2: a completed review blocks the retry.
	publishReview(t, reviewerJS, topo, "p-2", signReview(t, reviewer, schema.Review{Session: "p-2", CallID: crashed["p-2"].CallID, Verdict: schema.VerdictCompleted}))
	api.prepareRefused(ctx, "p-2", crashed["p-2"].CallID, "completed")
	// completed is final: a later trusted not_executed review, the same
	// review published again, and an attempt to delete the completed
	// review (even as admin) leave the retry refused.
	notExecuted := signReview(t, reviewer, schema.Review{Session: "p-2", CallID: crashed["p-2"].CallID, Verdict: schema.VerdictNotExecuted})
	publishReview(t, reviewerJS, topo, "p-2", notExecuted)
	publishReview(t, reviewerJS, topo, "p-2", notExecuted)
	if info, err := topo.Reviews.Info(ctx); err == nil {
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			if err := topo.Reviews.DeleteMsg(ctx, seq); err == nil {
				t.Fatalf("review seq %d was deleted", seq)
			}
		}
	}
	api.prepareRefused(ctx, "p-2", crashed["p-2"].CallID, "completed")

	// Every plan runs exactly once.
	retryOf := func(s string) []*schema.Call {
		var out []*schema.Call
		for _, c := range sessionCalls(t, topo, s) {
			if c.Operation != nil && c.Operation.Retry != nil {
				out = append(out, c)
			}
		}
		return out
	}
	streamtest.Eventually(t, waitLimit, "plans executed", func() bool {
		for s := range plans {
			r := retryOf(s)
			if len(r) != 1 || !resultFor(t, topo, s, r[0].CallID) {
				return false
			}
		}
		return true
	})
	// A plan published again, and a second prepare, change nothing.
	pb, _ := json.Marshal(plans["o-1"])
	if _, err := js.Publish(ctx, topo.Names().PlansSubject("o-1"), pb); err != nil {
		t.Fatal(err)
	}
	api.prepareRefused(ctx, "o-1", crashed["o-1"].CallID, "") // superseded or consumed: anything but a plan
	streamtest.Eventually(t, waitLimit, "plans consumer idle", func() bool {
		ci, err := topo.PlanLog.Consumer(ctx, topo.Names().PlanConsumerName(topo.Names().PartitionOf("o-1")))
		if err != nil {
			return false
		}
		info, err := ci.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})

	store := stream.NewPlans(topo.PlanBucket)
	for s, plan := range plans {
		r := retryOf(s)
		if len(r) != 1 {
			t.Errorf("%s: %d retries, want 1", s, len(r))
			continue
		}
		if r[0].Operation.Retry.PlanID != plan.PlanID || r[0].Operation.Key != crashed[s].Operation.Key {
			t.Errorf("%s: retry %+v does not follow plan %s", s, r[0].Operation, plan.PlanID)
		}
		rec, err := store.Get(ctx, plan.PlanID)
		if err != nil || rec.State != stream.PlanConsumed || rec.ConsumedBy != r[0].CallID {
			t.Errorf("%s: plan record %+v %v, want consumed by %s", s, rec, err, r[0].CallID)
		}
		if st := statusOf(t, topo, s, r[0].CallID); st != schema.StatusOK {
			t.Errorf("%s: retry ended %s, want ok", s, st)
		}
	}
	for s, plan := range plans {
		// Published on jw.plans.<session>, stored under the session's
		// partition: jw.plans.<partition>.<session>.
		info, err := topo.PlanLog.Info(ctx, jetstream.WithSubjectFilter(topo.Names().PlansStoredSubject(s)))
		// One publication by the recovery worker, one by the test.
		want := uint64(1)
		if s == "o-1" {
			want = 2
		}
		if err != nil || info.State.Subjects[topo.Names().PlansStoredSubject(s)] != want {
			t.Errorf("%s: messages on %s for plan %s: %v (%v), want %d", s, topo.Names().PlansStoredSubject(s), plan.PlanID, info.State.Subjects, err, want)
		}
	}
	for _, s := range []string{"p-2", "p-3"} {
		if r := retryOf(s); len(r) != 0 {
			t.Errorf("%s: retried %d times, want never", s, len(r))
		}
	}

	// Exactly one order record per order; payments: p-1 charged twice (the
	// reviewer said the first never happened), p-2 and p-3 once.
	os, err := tl.Orders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, o := range os {
		perKey[o.Key]++
	}
	for _, s := range orders {
		if perKey[crashed[s].Operation.Key] != 1 {
			t.Errorf("%s: %d order records for key %s, want 1", s, perKey[crashed[s].Operation.Key], crashed[s].Operation.Key)
		}
	}
	if len(os) != len(orders) {
		t.Errorf("%d orders, want %d", len(os), len(orders))
	}
	led, err := tl.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	charges := map[string]int{}
	for _, c := range led {
		charges[c.Session]++
	}
	if charges["p-1"] != 2 || charges["p-2"] != 1 || charges["p-3"] != 1 {
		t.Errorf("ledger entries per session %v, want p-1:2 p-2:1 p-3:1", charges)
	}

	// tool_calls equals the attempts in the logs. A live worker writes the
	// counts of tasks without a limit off its call path (within 50 ms), and
	// a takeover reconciles what a killed worker had not written yet: wait
	// for the counts to settle, then compare exactly.
	budget := stream.NewBudget(topo.Budget)
	mismatch := func() string {
		for _, s := range all {
			perTask := map[string]int64{}
			for _, c := range sessionCalls(t, topo, s) {
				perTask[c.Operation.Task]++
			}
			for task, n := range perTask {
				u, err := budget.Get(ctx, s, task)
				if err != nil || u.ToolCalls != n {
					return fmt.Sprintf("%s/%s: tool_calls %d (%v), the log has %d attempts", s, task, u.ToolCalls, err, n)
				}
			}
		}
		return ""
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := mismatch()
		if m == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after 10 s: %s", m)
			break
		}
	}

	// SIGTERM drains worker B: it exits 0 and gives every session back.
	if code := workerB.terminate(t, 20*time.Second); code != 0 {
		t.Errorf("worker B exited %d after SIGTERM, want 0", code)
	}
	for _, s := range all {
		if lv, ok, err := topo.Leases().LeaseHolder(ctx, s); err != nil || ok && lv.Owner == "tw-b" {
			t.Errorf("%s: lease %+v still held by worker B after its drain (%v)", s, lv, err)
		}
	}
}

// buildJingwei builds the binary once per test run.
func buildJingwei(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "jingwei")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/jingwei")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// processes runs jingwei child processes and kills them all at the end.
type processes struct {
	t   *testing.T
	bin string
	dir string

	mu    sync.Mutex
	procs []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	once sync.Once
}

func (ps *processes) start(name string, args ...string) *process {
	ps.t.Helper()
	logPath := filepath.Join(ps.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		ps.t.Fatal(err)
	}
	cmd := exec.Command(ps.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		ps.t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	p.once.Do(func() { _ = p.cmd.Process.Kill() })
	<-p.done
}

// terminate sends SIGTERM and returns the exit code once the process is
// gone; it fails the test if that takes longer than d.
func (p *process) terminate(t *testing.T, d time.Duration) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("%s still running %s after SIGTERM", p.name, d)
		return -1
	}
}

// killAll kills every process; on failure it shows their logs' tails.
func (ps *processes) killAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.procs {
		p.kill()
		if ps.t.Failed() {
			b, _ := os.ReadFile(p.log)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			ps.t.Logf("--- %s (last %d lines)\n%s", p.name, len(lines), strings.Join(lines, "\n"))
		}
	}
}

// waitLimit bounds how long a test waits for a condition
// (streamtest.Eventually).
const waitLimit = 60 * time.Second

func publishRequest(t *testing.T, js jetstream.JetStream, topo *stream.Topology, session, requestID, tool, args string) {
	t.Helper()
	b, _ := json.Marshal(schema.Request{V: 1, RequestID: requestID, Session: session, Task: worker.DefaultTask, Tool: tool, Arguments: json.RawMessage(args)})
	if _, err := js.Publish(context.Background(), topo.Names().RequestsSubject(session), b); err != nil {
		t.Fatal(err)
	}
}

func publishReview(t *testing.T, js jetstream.JetStream, topo *stream.Topology, session string, rv schema.Review) {
	t.Helper()
	b, _ := json.Marshal(rv)
	if _, err := js.Publish(context.Background(), topo.Names().ReviewsSubject(session), b); err != nil {
		t.Fatal(err)
	}
}

func signReview(t *testing.T, kp nkeys.KeyPair, rv schema.Review) schema.Review {
	t.Helper()
	rv.V, rv.Operator, rv.Evidence = 1, "alice@ops", "ticket-431"
	rv.At = time.Now().UTC().Format(time.RFC3339)
	signed, err := recovery.SignReview(kp, rv)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// tamper changes a signed review after signing: its signature no longer
// matches.
func tamper(rv schema.Review) schema.Review {
	rv.Verdict = schema.VerdictNotExecuted
	return rv
}

func sessionEvents(t *testing.T, topo *stream.Topology, session string) []schema.Event {
	t.Helper()
	h, err := topo.Logs().Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func hasEvent(t *testing.T, topo *stream.Topology, session, typ string) bool {
	for _, ev := range sessionEvents(t, topo, session) {
		if ev.Type == typ {
			return true
		}
	}
	return false
}

func sessionCalls(t *testing.T, topo *stream.Topology, session string) []*schema.Call {
	var out []*schema.Call
	for _, ev := range sessionEvents(t, topo, session) {
		if ev.Type == schema.TypeCall {
			out = append(out, ev.Call)
		}
	}
	return out
}

func callsWithRequest(t *testing.T, topo *stream.Topology, session, requestID string) []*schema.Call {
	var out []*schema.Call
	for _, c := range sessionCalls(t, topo, session) {
		if c.RequestID == requestID {
			out = append(out, c)
		}
	}
	return out
}

func resultFor(t *testing.T, topo *stream.Topology, session, callID string) bool {
	return statusOf(t, topo, session, callID) != ""
}

func statusOf(t *testing.T, topo *stream.Topology, session, callID string) schema.Status {
	for _, ev := range sessionEvents(t, topo, session) {
		if ev.Type == schema.TypeResult && ev.Result.CallID == callID {
			return ev.Result.Status
		}
	}
	return ""
}

// assessmentOf returns the latest assessment of callID published on
// jw.assessments.<session>.
func assessmentOf(t *testing.T, js jetstream.JetStream, topo *stream.Topology, session, callID string) (schema.Assessment, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := topo.Assessments.Info(ctx, jetstream.WithSubjectFilter(topo.Names().AssessmentsSubject(session)))
	if err != nil {
		return schema.Assessment{}, false
	}
	n := info.State.Subjects[topo.Names().AssessmentsSubject(session)] // with a filter, Msgs counts the whole stream
	if n == 0 {
		return schema.Assessment{}, false
	}
	cons, err := js.OrderedConsumer(ctx, topo.Names().StreamName("ASSESSMENTS"), jetstream.OrderedConsumerConfig{FilterSubjects: []string{topo.Names().AssessmentsSubject(session)}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		out   schema.Assessment
		found bool
	)
	for range n {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		as, err := schema.DecodeAssessments(m.Data()) // one or a batch
		if err != nil {
			t.Fatalf("assessment message on %s: %v", m.Subject(), err)
		}
		for _, a := range as {
			if a.CallID == callID {
				out, found = a, true
			}
		}
	}
	return out, found
}

// apiClient calls the jingwei micro service.
type apiClient struct {
	t  *testing.T
	nc *nats.Conn
}

type apiError struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// prepare asks jw.api.prepare; it retries while no service answers yet and
// while the call is not confirmed (its lease has not expired yet).
func (a *apiClient) prepare(ctx context.Context, session, callID string) (schema.Plan, string) {
	a.t.Helper()
	body, _ := json.Marshal(map[string]string{"session": session, "call_id": callID})
	for {
		msg, err := a.nc.RequestWithContext(ctx, "jw.api.prepare", body)
		if errors.Is(err, nats.ErrNoResponders) {
			if !sleepCtx(ctx) {
				a.t.Fatalf("prepare %s/%s: no service", session, callID)
			}
			continue
		}
		if err != nil {
			a.t.Fatalf("prepare %s/%s: %v", session, callID, err)
		}
		var e apiError
		if json.Unmarshal(msg.Data, &e) == nil && e.Error != nil {
			if e.Error.Code == "not_confirmed" {
				if !sleepCtx(ctx) {
					a.t.Fatalf("prepare %s/%s: never confirmed", session, callID)
				}
				continue
			}
			return schema.Plan{}, e.Error.Code
		}
		var p schema.Plan
		if err := json.Unmarshal(msg.Data, &p); err != nil || p.PlanID == "" {
			a.t.Fatalf("prepare %s/%s: answer %s", session, callID, bytes.TrimSpace(msg.Data))
		}
		return p, ""
	}
}

func (a *apiClient) prepareOK(ctx context.Context, session, callID string) schema.Plan {
	a.t.Helper()
	p, code := a.prepare(ctx, session, callID)
	if code != "" {
		a.t.Fatalf("prepare %s/%s refused: %s", session, callID, code)
	}
	return p
}

// prepareRefused checks that prepare is refused with code (any code when
// code is "").
func (a *apiClient) prepareRefused(ctx context.Context, session, callID, code string) {
	a.t.Helper()
	p, got := a.prepare(ctx, session, callID)
	if got == "" || code != "" && got != code {
		a.t.Fatalf("prepare %s/%s: plan %s, code %q; want refused with %q", session, callID, p.PlanID, got, code)
	}
}

func sleepCtx(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}
