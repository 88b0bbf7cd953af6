package prober_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
)

const session = "s-probe"

var chargeArgs = json.RawMessage(`{"account":"acct-1","amount_cents":500}`)

// env is a server, the example tools, a recovery worker trusting one person
// and one prober, and the keys.
type env struct {
	t                *testing.T
	ctx              context.Context
	topo             *stream.Topology
	tl               *tools.Tools
	rec              *recoverer.Recoverer
	planner          nkeys.KeyPair
	person, proberKP nkeys.KeyPair
}

func key(t *testing.T) (nkeys.KeyPair, string) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

func setup(t *testing.T, mods ...func(*recoverer.Config)) *env {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, topo: topo, tl: tl}
	var personPub, proberPub string
	e.person, personPub = key(t)
	e.proberKP, proberPub = key(t)
	e.planner, _ = key(t)
	reviewers, _ := recovery.NewTrustedKeys(personPub)
	probers, _ := recovery.NewTrustedKeys(proberPub)
	rcfg := recoverer.Config{Topology: topo, Name: "t", TrustedReviewers: reviewers, TrustedProbers: probers, PlannerKey: e.planner, DisableService: true}
	for _, m := range mods {
		m(&rcfg)
	}
	e.rec, err = recoverer.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.rec.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// startProber runs a prober over the example tools and their probes, with
// probe replaced by tools' own when nil.
func (e *env) startProber(mod func(*prober.Config)) {
	reg, err := worker.NewRegistry(append(e.tl.List(), e.tl.Probes()...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := prober.Config{Topology: e.topo, Key: e.proberKP, Tools: reg, Timeout: 2 * time.Second, Backoff: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	p, err := prober.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
}

func (e *env) runtime(tk *stream.Takeover, tool worker.Tool) *worker.Runtime {
	reg, err := worker.NewRegistry(tool)
	if err != nil {
		e.t.Fatal(err)
	}
	pp, _ := e.planner.PublicKey()
	planners, _ := recovery.NewTrustedKeys(pp)
	rt, err := worker.New(worker.Config{Session: session, Log: tk.Log, History: tk.History, Registry: reg,
		Plans: stream.NewPlans(e.topo.PlanBucket), Budget: stream.NewBudget(e.topo.Budget), TrustedPlanners: planners})
	if err != nil {
		e.t.Fatal(err)
	}
	return rt
}

// frozenCharge starts a payments.charge whose writer freezes before its
// side effect (as a SIGSTOPped process does: no timer of its own runs) and
// loses its lease; the recovery worker takes the session over. It returns
// the call id, and resume, which lets the frozen body go on and returns
// its body's error. With charge set, the body charges before it freezes
// (the effect landed, its answer did not).
func (e *env) frozenCharge(chargeFirst bool) (callID string, resume func() error) {
	entered, release := make(chan string, 1), make(chan struct{})
	bodyErr := make(chan error, 1)
	tool := e.tl.PaymentsChargeTool()
	charge := tool.Body
	tool.Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		if chargeFirst {
			_, err := charge(ctx, req)
			entered <- req.CallID
			<-release
			bodyErr <- err
			return nil, errors.New("lost")
		}
		entered <- req.CallID
		<-release
		_, err := charge(context.Background(), req)
		bodyErr <- err
		return nil, err
	}
	a, err := e.topo.Leases().TakeOver(e.ctx, session, "w-a", e.topo.Leases().SessionLeases())
	if err != nil {
		e.t.Fatal(err)
	}
	rt := e.runtime(a, tool)
	go func() { _, _ = rt.Call(e.ctx, tools.PaymentsCharge, chargeArgs) }()
	callID = <-entered
	a.Hold.Lose(errors.New("test: frozen, the lease is not renewed"))
	return callID, func() error {
		close(release)
		select {
		case err := <-bodyErr:
			return err
		case <-time.After(10 * time.Second):
			e.t.Fatal("frozen body did not finish")
			return nil
		}
	}
}

// deciding waits for a standing deciding review of callID matching ok.
func (e *env) deciding(callID string, what string, ok func(service.ReviewCheck) bool) service.ReviewCheck {
	var got service.ReviewCheck
	streamtest.Eventually(e.t, 20*time.Second, what, func() bool {
		cs, err := e.rec.Reviews(e.ctx, session, callID)
		if err != nil {
			return false
		}
		for _, c := range cs {
			if c.Accepted && ok(c) {
				got = c
				return true
			}
		}
		return false
	})
	return got
}

// TestProbeNotFoundSettlesAndZombieCannotLand: a payment whose writer froze
// before charging is assessed uncertain; the prober raises the ledger's
// fence, finds no charge, and signs not_executed; the recovery worker
// accepts it (a probe's review, by the prober key) and plans one retry;
// the frozen writer resumes after the probe's not_found and its charge is
// refused; the retry charges. One charge.
func TestProbeNotFoundSettlesAndZombieCannotLand(t *testing.T) {
	e := setup(t)
	e.startProber(nil)
	callID, resume := e.frozenCharge(false)
	c := e.deciding(callID, "the probe's not_executed is accepted", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Verdict == schema.VerdictNotExecuted
	})
	if c.Review.Probe != tools.PaymentsLookup || c.Review.Source() != "probe" {
		t.Fatalf("deciding review %+v: want the payments.lookup probe's", c.Review)
	}
	// The old writer wakes up after the probe's not_found: refused.
	if err := resume(); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("frozen writer's charge: %v, want fence.ErrStale", err)
	}
	plan, err := e.rec.Prepare(e.ctx, session, callID)
	if err != nil {
		t.Fatalf("prepare on the probe's review: %v", err)
	}
	if plan.Basis != schema.BasisReviewedNotExecuted || plan.Review == nil || plan.Review.Probe != tools.PaymentsLookup {
		t.Fatalf("plan %+v", plan)
	}
	var b *stream.Takeover
	streamtest.Eventually(t, 10*time.Second, "a new writer takes the session", func() bool {
		b, err = e.topo.Leases().TakeOver(e.ctx, session, "w-b", e.topo.Leases().SessionLeases())
		return err == nil
	})
	res, err := e.runtime(b, e.tl.PaymentsChargeTool()).CallWithOptions(e.ctx, tools.PaymentsCharge, chargeArgs, worker.CallOptions{Retry: &plan})
	if err != nil || res.Status != schema.StatusOK {
		t.Fatalf("retry: %+v %v", res, err)
	}
	l, _ := e.tl.Ledger(e.ctx)
	if len(l) != 1 || l[0].CallID != res.CallID {
		t.Fatalf("ledger %+v: want exactly the retry's charge", l)
	}
}

// TestProbeFoundCompletes: the charge landed and the answer was lost; the
// probe finds it and signs completed; no retry can be planned.
func TestProbeFoundCompletes(t *testing.T) {
	e := setup(t)
	e.startProber(nil)
	callID, resume := e.frozenCharge(true)
	c := e.deciding(callID, "the probe's completed is accepted", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Verdict == schema.VerdictCompleted
	})
	if c.Review.Probe != tools.PaymentsLookup {
		t.Fatalf("review %+v", c.Review)
	}
	if _, err := e.rec.Prepare(e.ctx, session, callID); schema.CodeOf(err) != schema.CodeCompleted {
		t.Fatalf("prepare after the probe found the charge: %v, want completed", err)
	}
	_ = resume()
	if l, _ := e.tl.Ledger(e.ctx); len(l) != 1 {
		t.Fatalf("ledger %+v: want the one charge", l)
	}
}
