// The call the probe cannot decide: a payment whose provider answers late.

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// The undecided payment's session, task, arguments and timeout.
const (
	SlowSession = "demo-slow-payments"
	SlowTask    = "checkout-2"
	// slowTimeout is the slow payment's tool timeout: the provider takes
	// longer.
	slowTimeout = time.Second
)

var slowArgs = json.RawMessage(`{"account":"acct-17","amount_cents":4999}`)

// UndecidedReport is what became of the call the probe could not decide.
type UndecidedReport struct {
	// CallID is the slow payment's call.
	CallID string `json:"call_id"`
	// Result is its tool.result status: timeout.
	Result string `json:"result"`
	// Decision is the recovery worker's decision before any review:
	// needs_review.
	Decision string `json:"decision"`
	// ProbeVerdict is the probe's automated review: uncertain (evidence
	// only, it decides nothing); ProbeEvidence what it found.
	ProbeVerdict  schema.Verdict `json:"probe_verdict"`
	ProbeEvidence string         `json:"probe_evidence"`
	// Verdict is the verdict that settled the call, and SettledBy who
	// signed it: a person.
	Verdict   schema.Verdict `json:"verdict"`
	SettledBy string         `json:"settled_by"`
	// Retry is what became of the call's retry: "refused (completed)".
	Retry string `json:"retry"`
	// Charges is the number of ledger entries of the call: the late one.
	Charges int `json:"charges"`
}

// slowWriter is an agent that runs payments.charge in its own process
// (worker.Runtime on a session lease: a writer outside the tool workers'
// partitions, docs/protocol.md §7) against a payment provider that answers
// after the tool's timeout. The body ignores its deadline, as a body
// stuck in I/O does, and charges when the story lets the provider answer.
type slowWriter struct {
	rt       *worker.Runtime
	hold     stream.Hold
	release  chan struct{} // closed: the provider answers
	charged  chan error    // the body's charge, once it ran
	stop     context.CancelFunc
	renewals chan struct{} // closed when the renewals have stopped
}

// startSlowWriter takes SlowSession's lease as the worker role and keeps
// it renewed until close.
func (s *story) startSlowWriter(ctx context.Context) (*slowWriter, error) {
	nc, err := s.connect(access.RoleWorker)
	if err != nil {
		return nil, err
	}
	s.roles[access.RoleWorker] = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{LeaseTTL: s.cfg.LeaseTTL})
	if err != nil {
		return nil, err
	}
	tl, err := tools.New(ctx, tools.Config{JS: js})
	if err != nil {
		return nil, err
	}
	w := &slowWriter{release: make(chan struct{}), charged: make(chan error, 1), renewals: make(chan struct{})}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	w.stop = stop
	tool := tl.PaymentsChargeTool()
	charge := tool.Body
	tool.Timeout = slowTimeout
	tool.Body = func(bctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		select {
		case <-w.release:
		case <-rctx.Done():
			w.charged <- rctx.Err()
			return nil, rctx.Err()
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(bctx), s.cfg.StepTimeout)
		defer cancel()
		out, err := charge(cctx, req)
		w.charged <- err
		return out, err
	}
	tk, err := topo.Leases().TakeOver(ctx, SlowSession, "demo-agent-slow", topo.Leases().SessionLeases())
	if err != nil {
		stop()
		return nil, fmt.Errorf("take the slow payment's session: %w", err)
	}
	w.hold = tk.Hold
	go w.renew(rctx, s.cfg.LeaseTTL)
	reg, err := worker.NewRegistry(tool)
	if err == nil {
		w.rt, err = worker.New(worker.Config{Session: SlowSession, Log: tk.Log, History: tk.History, Registry: reg, DefaultTask: SlowTask,
			Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
	}
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// renew keeps the session lease while the story runs: the writer is
// alive, so nobody fences the session.
func (w *slowWriter) renew(ctx context.Context, ttl time.Duration) {
	defer close(w.renewals)
	h, ok := w.hold.(*stream.LeaseHold)
	if !ok {
		return
	}
	t := time.NewTicker(ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = h.Renew(ctx)
		}
	}
}

// close stops the renewals, lets a body still waiting end, and gives the
// session up.
func (w *slowWriter) close() {
	w.stop()
	<-w.renewals
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.hold.Release(ctx)
}

// undecidedPayment tells the call the probe cannot decide. The slow
// payment times out while its writer still holds the session: nobody
// fenced it, so payments.lookup raises nothing and its "no charge yet"
// proves nothing (a late charge could still land). The prober attaches
// that evidence and decides nothing; the call still needs a person. Then
// the provider answers: the late charge lands — a not_executed would have
// been wrong. The person finds it in the ledger and signs completed; the
// retry is refused.
func (s *story) undecidedPayment(ctx context.Context) error {
	w, err := s.startSlowWriter(ctx)
	if err != nil {
		return err
	}
	defer w.close()
	rep := &UndecidedReport{}
	s.rep.Undecided = rep
	cctx, cancel := s.step(ctx)
	res, err := w.rt.Call(cctx, tools.PaymentsCharge, slowArgs)
	cancel()
	if res.Status != schema.StatusTimeout {
		return fmt.Errorf("%w: the slow payment: %+v, %v (want a timeout)", ErrStory, res, err)
	}
	rep.CallID, rep.Result = res.CallID, string(res.Status)
	s.say("agent", "call %s payments.charge %s on %s, run in the agent's own process (session lease, timeout %s):\n%s: the payment provider has not answered, and the body goes on",
		res.CallID, slowArgs, SlowSession, slowTimeout, res.Status)
	a, err := s.waitAssessed(ctx, res.CallID)
	if err != nil {
		return err
	}
	rep.Decision = string(a.Decision)
	s.say("recover", "%s payments.charge: %s (evidence %s) -> %s (no fence: its writer still holds the session)", res.CallID, a.Outcome, a.Evidence, a.Decision)
	probe, err := s.waitProbe(ctx, SlowSession, res.CallID)
	if err != nil {
		return err
	}
	if probeSettled(probe) {
		return fmt.Errorf("%w: the probe decided the slow payment (%s) though no fence was raised", ErrStory, probe.Review.Verdict)
	}
	rep.ProbeVerdict, rep.ProbeEvidence = probe.Review.Verdict, probe.Review.Evidence
	s.say("probe", "%s could not decide call %s: %s\nevidence only (%s): the call still needs a person", probe.Review.Probe, res.CallID, probe.Review.Evidence, probe.Review.Verdict)
	if _, err := s.prepare(ctx, SlowSession, res.CallID); schema.CodeOf(err) != schema.CodeNeedsReview {
		return fmt.Errorf("%w: prepare of the slow payment after the probe: %v (want needs_review)", ErrStory, err)
	}
	s.say("host", "retry %s: refused, needs_review (the probe's evidence decides nothing)", res.CallID)
	close(w.release)
	if err := <-w.charged; err != nil {
		return fmt.Errorf("the slow provider's late charge: %w", err)
	}
	ch, err := s.waitCharge(ctx, res.CallID)
	if err != nil {
		return err
	}
	s.say("provider", "the payment provider answers at last: ledger entry #%d written for call %s (a late charge, which a not_executed would have denied)", ch.Seq, res.CallID)
	if rep.Verdict, err = s.personReview(ctx, SlowSession, res.CallID); err != nil {
		return err
	}
	rep.SettledBy = "person demo-reviewer@ops"
	if _, err := s.prepare(ctx, SlowSession, res.CallID); schema.CodeOf(err) != schema.CodeCompleted {
		return fmt.Errorf("%w: prepare of the slow payment after the person's completed: %v (want completed)", ErrStory, err)
	}
	rep.Retry = "refused (completed)"
	s.say("host", "retry %s: refused, completed: settled by a person after the probe could not decide", res.CallID)
	ledger, err := s.tools.Ledger(ctx)
	if err != nil {
		return err
	}
	for _, c := range ledger {
		if c.CallID == res.CallID {
			rep.Charges++
		}
	}
	return nil
}

// waitAssessed waits for the recovery worker's assessment of a finished
// call (its tool.result is on the log; no takeover).
func (s *story) waitAssessed(ctx context.Context, callID string) (schema.Assessment, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var a schema.Assessment
	err := s.watch.wait(ctx, "the recovery worker's assessment of call "+callID, s.check, func() bool {
		var ok bool
		a, ok = s.watch.assessment(callID)
		return ok
	})
	return a, err
}
