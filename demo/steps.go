// The steps of the story, in the order run tells them.

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/internal/proc"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/tools"
)

// run tells the story, one step per method.
func (s *story) run(ctx context.Context) (Report, error) {
	t0 := time.Now()
	fmt.Fprintln(s.out, "jingwei demo: an order and a payment, a tool worker killed in the middle of both, and a safe recovery.")
	fmt.Fprintln(s.out)
	if err := s.startServer(ctx); err != nil {
		return s.rep, err
	}
	trustFile, err := s.loadReviewerKey()
	if err != nil {
		return s.rep, err
	}
	held, err := s.startWorkers(ctx, trustFile)
	if err != nil {
		return s.rep, err
	}
	if err := s.sendRequests(ctx); err != nil {
		return s.rep, err
	}
	order, pay, orderRec, err := s.waitMidway(ctx)
	if err != nil {
		return s.rep, err
	}
	s.crash(held)
	if err := s.waitTakeovers(ctx, order, pay); err != nil {
		return s.rep, err
	}
	approver, w2, w2Args, err := s.startRetryWorker()
	if err != nil {
		return s.rep, err
	}
	if err := s.retryOrder(ctx, order, orderRec); err != nil {
		return s.rep, err
	}
	if err := s.reviewPayment(ctx, pay); err != nil {
		return s.rep, err
	}
	if err := s.retryPayment(ctx, pay); err != nil {
		return s.rep, err
	}
	// A payment the probe cannot decide: a person settles it
	// (undecided.go).
	if err := s.undecidedPayment(ctx); err != nil {
		return s.rep, err
	}
	if err := s.table(ctx); err != nil {
		return s.rep, err
	}
	// An approval that survives a crash (approval.go), then stop
	// everything.
	if err := s.approvals(ctx, approver, w2, w2Args); err != nil {
		return s.rep, err
	}
	s.procs.stopAll(5 * time.Second)
	fmt.Fprintln(s.out)
	s.say("stop", "%d child processes stopped, server shut down; the story took %.1fs", len(s.rep.Children), time.Since(t0).Seconds())
	return s.rep, nil
}

// startServer starts a fresh server with authorization on (one key per
// role), the topology, the example tools' stores, the watcher and the
// connections of the agent, the reviewer and the host.
func (s *story) startServer(ctx context.Context) error {
	s.keys = access.KeyDir(filepath.Join(s.dir, "auth"))
	if _, err := s.keys.Init(); err != nil {
		return err
	}
	users, err := s.keys.PublicKeys()
	if err != nil {
		return err
	}
	cfg := embeddedConfig(s.dir, s.log)
	cfg.Auth = access.Users{Keys: users}
	srv, err := natsnode.StartEmbedded(ctx, cfg)
	if err != nil {
		return fmt.Errorf("start embedded server: %w", err)
	}
	s.srv = srv
	// The narrator (set-up, reading the business records, watching the
	// logs) is admin; the agent, the reviewer and the host act through
	// connections of their own roles, as they would from elsewhere.
	if s.nc, err = s.connect(access.RoleAdmin); err != nil {
		return err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	// The lease TTL is one setting of the deployment (stored with the
	// leases bucket): every process below runs with it.
	if s.topo, err = stream.EnsureTopology(ctx, js, stream.TopologyConfig{LeaseTTL: s.cfg.LeaseTTL, Logger: s.log}); err != nil {
		return err
	}
	if s.tools, err = tools.New(ctx, tools.Config{JS: js}); err != nil {
		return err
	}
	if s.watch, err = newWatcher(s.nc, s.topo); err != nil {
		return err
	}
	s.roles = map[access.Role]*nats.Conn{}
	for _, r := range []access.Role{access.RoleAgent, access.RoleReviewer, access.RoleHost} {
		if s.roles[r], err = s.connect(r); err != nil {
			return err
		}
	}
	s.url, s.auth = srv.ClientURL(), string(s.keys)
	s.say("server", "embedded NATS with JetStream at %s, fresh store in %s\nauthorization on: one key per role in %s (agent, reviewer, host, worker, recoverer, prober, admin)", s.url, filepath.Join(s.dir, "nats"), s.keys)
	return nil
}

// loadReviewerKey makes the reviewer's key, trusted by the recovery
// worker, and returns the trust file.
func (s *story) loadReviewerKey() (trustFile string, err error) {
	s.reviewer, trustFile, err = s.reviewerKey()
	if err != nil {
		return "", err
	}
	s.reviewerPub, _ = s.reviewer.PublicKey()
	return trustFile, nil
}

// startWorkers starts the recovery worker and a tool worker whose bodies
// stop midway, the one the story kills.
func (s *story) startWorkers(ctx context.Context, trustFile string) (*proc.Child, error) {
	proberFile, proberPub, err := s.proberKey()
	if err != nil {
		return nil, err
	}
	rec, err := s.start("recover", "recover", "--server", s.url, "--auth", s.auth, "--trust-reviewers", trustFile, "--probe-key", proberFile, "--lease-ttl", s.cfg.LeaseTTL.String(), "--log-format", "json")
	if err != nil {
		return nil, err
	}
	// The real tool worker holds every body after its side effect
	// (--tool-delay-after); stopping the payment before its effect needs
	// per-tool hold points, which only the demo's own worker has.
	ttl := s.cfg.LeaseTTL.String()
	workerArgs := []string{"worker", "--server", s.url, "--auth", s.auth, "--lease-ttl", ttl, "--tool-delay-after", "5m", "--log-format", "json"}
	if s.cfg.PaymentHold == HoldBefore {
		holds := map[string]HoldPoint{tools.OrdersCreate: HoldAfter, tools.PaymentsCharge: HoldBefore}
		workerArgs = []string{"demo", "worker", "--server", s.url, "--auth", s.auth, "--lease-ttl", ttl, "--hold", FormatHolds(holds), "--log-format", "json"}
	}
	held, err := s.start("worker-1", workerArgs...)
	if err != nil {
		return nil, err
	}
	if err := s.waitService(ctx); err != nil {
		return nil, err
	}
	s.say("start", "recovery worker  pid %-6d jingwei recover --trust-reviewers %s --probe-key %s", rec.PID(), filepath.Base(trustFile), filepath.Base(proberFile))
	s.say("", "tool worker      pid %-6d jingwei %s", held.PID(), strings.Join(publicArgs(workerArgs), " "))
	s.say("", "reviewer key     %s (trusted)", s.reviewerPub)
	s.say("", "prober key       %s (trusted as a prober's: runs payments.lookup for uncertain payments)", proberPub)
	return held, nil
}

// sendRequests publishes the agent's two requests, as the agent role.
func (s *story) sendRequests(ctx context.Context) error {
	agent, err := jetstream.New(s.roles[access.RoleAgent])
	if err != nil {
		return err
	}
	for _, q := range []schema.Request{
		{V: schema.Version, RequestID: OrderRequest, Session: OrderSession, Task: Task, Tool: tools.OrdersCreate, Arguments: orderArgs},
		{V: schema.Version, RequestID: PaymentRequest, Session: PaymentSession, Task: Task, Tool: tools.PaymentsCharge, Arguments: paymentArgs},
	} {
		b, _ := json.Marshal(q)
		if _, err := agent.Publish(ctx, s.topo.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(stream.RequestMsgIDOf(q))); err != nil {
			return fmt.Errorf("publish request %s: %w", q.RequestID, err)
		}
		s.say("agent", "request %-10s %s %s on %s", q.RequestID, q.Tool, q.Arguments, s.topo.Names().RequestsSubject(q.Session))
	}
	return nil
}

// waitMidway waits until both bodies are in the middle: started, business
// record written (or, for a payment held before its effect, not).
func (s *story) waitMidway(ctx context.Context) (order, pay *schema.Call, orderRec tools.Order, err error) {
	if order, err = s.waitStarted(ctx, OrderSession, OrderRequest); err != nil {
		return nil, nil, orderRec, err
	}
	if pay, err = s.waitStarted(ctx, PaymentSession, PaymentRequest); err != nil {
		return nil, nil, orderRec, err
	}
	if orderRec, err = s.waitOrder(ctx, order.Operation.Key); err != nil {
		return nil, nil, orderRec, err
	}
	s.say("worker", "call %s orders.create   started; order %s written (key %s)", order.CallID, orderRec.OrderID, order.Operation.Key)
	if s.cfg.PaymentHold == HoldAfter {
		ch, err := s.waitCharge(ctx, pay.CallID)
		if err != nil {
			return nil, nil, orderRec, err
		}
		s.say("", "call %s payments.charge started; ledger entry #%d written (%d cents to %s)", pay.CallID, ch.Seq, ch.AmountCents, ch.Account)
	} else {
		s.say("", "call %s payments.charge started; the body has not charged yet", pay.CallID)
	}
	return order, pay, orderRec, nil
}

// crash kills the tool worker that holds both calls.
func (s *story) crash(held *proc.Child) {
	held.Kill()
	s.dead[held] = true
	s.rep.Killed = held.PID()
	s.say("CRASH", "SIGKILL tool worker pid %d: neither call's result reaches the log", held.PID())
	s.killedAt = time.Now()
}

// waitTakeovers waits for the recovery worker to take both sessions over
// and classify their calls.
func (s *story) waitTakeovers(ctx context.Context, order, pay *schema.Call) error {
	for _, c := range []*schema.Call{order, pay} {
		a, fence, err := s.waitAssessment(ctx, c)
		if err != nil {
			return err
		}
		s.say("recover", "%s: lease expired, session taken over %.1fs after the kill (fenced at epoch %d)\n%s %s: %s (evidence %s) -> %s",
			sessionOf(c, order), time.Since(s.killedAt).Seconds(), fence.Epoch, c.CallID, c.Tool, a.Outcome, a.Evidence, a.Decision)
	}
	return nil
}

// startRetryWorker starts a fresh tool worker to run retry plans
// (payments above ApprovalAbove wait for approval there: approval.go).
func (s *story) startRetryWorker() (approver nkeys.KeyPair, w2 *proc.Child, w2Args []string, err error) {
	approver, apFlags, err := s.approverKey()
	if err != nil {
		return nil, nil, nil, err
	}
	w2Args = append([]string{"worker", "--server", s.url, "--auth", s.auth, "--lease-ttl", s.cfg.LeaseTTL.String(), "--log-format", "json"}, apFlags...)
	if w2, err = s.start("worker-2", w2Args...); err != nil {
		return nil, nil, nil, err
	}
	s.say("start", "tool worker      pid %-6d jingwei worker --require-approval %s (a fresh process, nothing held)", w2.PID(), apFlags[1])
	return approver, w2, w2Args, nil
}

// retryOrder retries the order: idempotent, so an explicit prepare gives
// a plan, and the retry with the same key finds the order.
func (s *story) retryOrder(ctx context.Context, order *schema.Call, orderRec tools.Order) error {
	plan, err := s.prepare(ctx, OrderSession, order.CallID)
	if err != nil {
		return fmt.Errorf("prepare the order's retry: %w", err)
	}
	s.say("host", "retry %s: plan %s (basis %s, same key %s)", order.CallID, plan.PlanID, plan.Basis, plan.Key)
	retry, res, err := s.waitPlanRun(ctx, OrderSession, plan.PlanID)
	if err != nil {
		return err
	}
	s.say("worker", "call %s orders.create (retry, attempt 2): %s %s", retry.CallID, res.Status, res.Output)
	orders, err := s.tools.Orders(ctx)
	if err != nil {
		return err
	}
	s.say("", "orders.create found order %s under key %s: %d order record(s)", orderRec.OrderID, plan.Key, len(orders))
	return nil
}

// reviewPayment settles the payment: non-idempotent, so no plan without
// a review. The prober reads the ledger back the way a reviewer would (it
// raises the ledger's fence to the session's epoch, then looks the charge
// up); when it cannot decide, a person checks the ledger and signs.
func (s *story) reviewPayment(ctx context.Context, pay *schema.Call) error {
	probe, err := s.waitProbe(ctx, PaymentSession, pay.CallID)
	if err != nil {
		return err
	}
	verdict := probe.Review.Verdict
	if probeSettled(probe) {
		s.rep.PaymentSettledBy = "probe " + probe.Review.Probe
		s.say("probe", "%s (key %s...) for call %s: %s\nsigns verdict %s as a probe's review: settled without a person", probe.Review.Probe, probe.Review.Signer[:12], pay.CallID, probe.Review.Evidence, verdict)
	} else {
		s.say("probe", "%s could not decide call %s: %s\nevidence only: the call still needs a person", probe.Review.Probe, pay.CallID, probe.Review.Evidence)
		if _, err := s.prepare(ctx, PaymentSession, pay.CallID); schema.CodeOf(err) != schema.CodeNeedsReview {
			return fmt.Errorf("%w: prepare of the payment before a person's review: %v (want needs_review)", ErrStory, err)
		}
		s.say("host", "retry %s: refused, needs_review (a non-idempotent call that may have run)", pay.CallID)
		if verdict, err = s.personReview(ctx, PaymentSession, pay.CallID); err != nil {
			return err
		}
		s.rep.PaymentSettledBy = "person demo-reviewer@ops"
	}
	s.rep.PaymentVerdict = verdict
	return nil
}

// retryPayment asks for the payment's retry after the review: refused
// when the ledger showed the charge, run when it did not.
func (s *story) retryPayment(ctx context.Context, pay *schema.Call) error {
	pplan, err := s.prepare(ctx, PaymentSession, pay.CallID)
	switch {
	case s.rep.PaymentVerdict == schema.VerdictCompleted:
		if schema.CodeOf(err) != schema.CodeCompleted {
			return fmt.Errorf("%w: prepare after a completed review: plan %+v, %v (want completed)", ErrStory, pplan, err)
		}
		s.rep.PaymentRetry = "refused (completed)"
		s.say("host", "retry %s: refused, completed: the charge happened; no second charge and no invented result", pay.CallID)
	case err != nil:
		return fmt.Errorf("prepare the payment's retry after a not_executed review: %w", err)
	default:
		s.say("host", "retry %s: plan %s (basis %s)", pay.CallID, pplan.PlanID, pplan.Basis)
		pr, pres, err := s.waitPlanRun(ctx, PaymentSession, pplan.PlanID)
		if err != nil {
			return err
		}
		s.rep.PaymentRetry = string(pres.Status)
		s.say("worker", "call %s payments.charge (retry, attempt 2): %s %s", pr.CallID, pres.Status, pres.Output)
	}
	return nil
}
