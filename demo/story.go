package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/proc"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker/service"
)

// The story's tool arguments.
var (
	orderArgs   = json.RawMessage(`{"sku":"A-1","qty":2,"customer":"cust-9"}`)
	paymentArgs = json.RawMessage(`{"account":"acct-42","amount_cents":1999}`)
)

// story is one run of the demo.
type story struct {
	cfg   Config
	dir   string
	out   io.Writer
	log   zerolog.Logger
	procs *children
	dead  map[*proc.Child]bool // children the story killed or stopped on purpose

	srv   *natsnode.Embedded
	keys  access.KeyDir // the role credentials the server enforces
	nc    *nats.Conn    // admin: set-up, and the narrator's view of everything
	roles map[access.Role]*nats.Conn
	topo  *stream.Topology
	tools *tools.Tools
	watch *watcher

	rep Report
}

// say prints one step: a short tag and a line; continuation lines (tag "")
// are indented under it.
func (s *story) say(tag, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for i, line := range strings.Split(msg, "\n") {
		if i > 0 {
			tag = ""
		}
		fmt.Fprintf(s.out, "%-8s %s\n", tag, line)
	}
}

// step returns a context bounded by the step timeout.
func (s *story) step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.StepTimeout)
}

func (s *story) check() error { return s.procs.failed(s.dead) }

func (s *story) shutdown() {
	s.procs.stopAll(5 * time.Second)
	if s.watch != nil {
		s.watch.close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, nc := range s.roles {
		nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
	}
}

func (s *story) start(name string, args ...string) (*proc.Child, error) {
	c, err := s.procs.start(name, args...)
	if err != nil {
		return nil, err
	}
	s.rep.Children = append(s.rep.Children, c.PID())
	return c, nil
}

func (s *story) run(ctx context.Context) (Report, error) {
	t0 := time.Now()
	fmt.Fprintln(s.out, "jingwei demo: an order and a payment, a tool worker killed in the middle of both, and a safe recovery.")
	fmt.Fprintln(s.out)

	// 1. A fresh server, with authorization on: one key per role.
	s.keys = access.KeyDir(filepath.Join(s.dir, "auth"))
	if _, err := s.keys.Init(); err != nil {
		return s.rep, err
	}
	users, err := s.keys.PublicKeys()
	if err != nil {
		return s.rep, err
	}
	cfg := embeddedConfig(s.dir, s.log)
	cfg.Auth = access.Users{Keys: users}
	srv, err := natsnode.StartEmbedded(ctx, cfg)
	if err != nil {
		return s.rep, fmt.Errorf("start embedded server: %w", err)
	}
	s.srv = srv
	// The narrator (set-up, reading the business records, watching the
	// logs) is admin; the agent, the reviewer and the host act through
	// connections of their own roles, as they would from elsewhere.
	if s.nc, err = s.connect(access.RoleAdmin); err != nil {
		return s.rep, err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return s.rep, err
	}
	// The lease TTL is one setting of the deployment (stored with the
	// leases bucket): every process below runs with it.
	if s.topo, err = stream.EnsureTopology(ctx, js, stream.TopologyConfig{LeaseTTL: s.cfg.LeaseTTL, Logger: s.log}); err != nil {
		return s.rep, err
	}
	if s.tools, err = tools.New(ctx, tools.Config{JS: js}); err != nil {
		return s.rep, err
	}
	if s.watch, err = newWatcher(s.nc, s.topo); err != nil {
		return s.rep, err
	}
	s.roles = map[access.Role]*nats.Conn{}
	for _, r := range []access.Role{access.RoleAgent, access.RoleReviewer, access.RoleHost} {
		if s.roles[r], err = s.connect(r); err != nil {
			return s.rep, err
		}
	}
	url := srv.ClientURL()
	s.say("server", "embedded NATS with JetStream at %s, fresh store in %s\nauthorization on: one key per role in %s (agent, reviewer, host, worker, recoverer, admin)", url, filepath.Join(s.dir, "nats"), s.keys)
	auth := string(s.keys)

	// 2. The reviewer's key, trusted by the recovery worker.
	kp, trustFile, err := s.reviewerKey()
	if err != nil {
		return s.rep, err
	}
	pub, _ := kp.PublicKey()

	// 3. The recovery worker and a tool worker whose bodies stop midway.
	rec, err := s.start("recover", "recover", "--server", url, "--auth", auth, "--trust-reviewers", trustFile, "--lease-ttl", s.cfg.LeaseTTL.String(), "--log-format", "json")
	if err != nil {
		return s.rep, err
	}
	// The real tool worker holds every body after its side effect
	// (--tool-delay-after); stopping the payment before its effect needs
	// per-tool hold points, which only the demo's own worker has.
	ttl := s.cfg.LeaseTTL.String()
	workerArgs := []string{"worker", "--server", url, "--auth", auth, "--lease-ttl", ttl, "--tool-delay-after", "5m", "--log-format", "json"}
	if s.cfg.PaymentHold == HoldBefore {
		holds := map[string]HoldPoint{tools.OrdersCreate: HoldAfter, tools.PaymentsCharge: HoldBefore}
		workerArgs = []string{"demo", "worker", "--server", url, "--auth", auth, "--lease-ttl", ttl, "--hold", FormatHolds(holds), "--log-format", "json"}
	}
	held, err := s.start("worker-1", workerArgs...)
	if err != nil {
		return s.rep, err
	}
	if err := s.waitService(ctx); err != nil {
		return s.rep, err
	}
	s.say("start", "recovery worker  pid %-6d jingwei recover --trust-reviewers %s", rec.PID(), filepath.Base(trustFile))
	s.say("", "tool worker      pid %-6d jingwei %s", held.PID(), strings.Join(publicArgs(workerArgs), " "))
	s.say("", "reviewer key     %s (trusted)", pub)

	// 4. The agent's requests.
	agent, err := jetstream.New(s.roles[access.RoleAgent])
	if err != nil {
		return s.rep, err
	}
	for _, q := range []schema.Request{
		{V: schema.Version, RequestID: OrderRequest, Session: OrderSession, Task: Task, Tool: tools.OrdersCreate, Arguments: orderArgs},
		{V: schema.Version, RequestID: PaymentRequest, Session: PaymentSession, Task: Task, Tool: tools.PaymentsCharge, Arguments: paymentArgs},
	} {
		b, _ := json.Marshal(q)
		if _, err := agent.Publish(ctx, s.topo.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(stream.RequestMsgIDOf(q))); err != nil {
			return s.rep, fmt.Errorf("publish request %s: %w", q.RequestID, err)
		}
		s.say("agent", "request %-10s %s %s on %s", q.RequestID, q.Tool, q.Arguments, s.topo.Names().RequestsSubject(q.Session))
	}

	// 5. Both bodies are in the middle: started, business record written
	// (or, for a payment held before its effect, not).
	order, err := s.waitStarted(ctx, OrderSession, OrderRequest)
	if err != nil {
		return s.rep, err
	}
	pay, err := s.waitStarted(ctx, PaymentSession, PaymentRequest)
	if err != nil {
		return s.rep, err
	}
	orderRec, err := s.waitOrder(ctx, order.Operation.Key)
	if err != nil {
		return s.rep, err
	}
	s.say("worker", "call %s orders.create   started; order %s written (key %s)", order.CallID, orderRec.OrderID, order.Operation.Key)
	if s.cfg.PaymentHold == HoldAfter {
		ch, err := s.waitCharge(ctx, pay.CallID)
		if err != nil {
			return s.rep, err
		}
		s.say("", "call %s payments.charge started; ledger entry #%d written (%d cents to %s)", pay.CallID, ch.Seq, ch.AmountCents, ch.Account)
	} else {
		s.say("", "call %s payments.charge started; the body has not charged yet", pay.CallID)
	}

	// 6. The crash.
	held.Kill()
	s.dead[held] = true
	s.rep.Killed = held.PID()
	s.say("CRASH", "SIGKILL tool worker pid %d: neither call's result reaches the log", held.PID())

	// 7. The recovery worker takes the sessions over and classifies.
	tc := time.Now()
	for _, c := range []*schema.Call{order, pay} {
		a, fence, err := s.waitAssessment(ctx, c)
		if err != nil {
			return s.rep, err
		}
		s.say("recover", "%s: lease expired, session taken over %.1fs after the kill (fenced at epoch %d)\n%s %s: %s (evidence %s) -> %s",
			sessionOf(c, order), time.Since(tc).Seconds(), fence.Epoch, c.CallID, c.Tool, a.Outcome, a.Evidence, a.Decision)
	}

	// 8. A fresh tool worker to run retry plans (payments above
	// ApprovalAbove wait for approval there: approval.go).
	approver, apFlags, err := s.approverKey()
	if err != nil {
		return s.rep, err
	}
	w2Args := append([]string{"worker", "--server", url, "--auth", auth, "--lease-ttl", ttl, "--log-format", "json"}, apFlags...)
	w2, err := s.start("worker-2", w2Args...)
	if err != nil {
		return s.rep, err
	}
	s.say("start", "tool worker      pid %-6d jingwei worker --require-approval %s (a fresh process, nothing held)", w2.PID(), apFlags[1])

	// 9. The order: idempotent, so an explicit prepare gives a plan, and
	// the retry with the same key finds the order.
	plan, err := s.prepare(ctx, OrderSession, order.CallID)
	if err != nil {
		return s.rep, fmt.Errorf("prepare the order's retry: %w", err)
	}
	s.say("host", "retry %s: plan %s (basis %s, same key %s)", order.CallID, plan.PlanID, plan.Basis, plan.Key)
	retry, res, err := s.waitPlanRun(ctx, OrderSession, plan.PlanID)
	if err != nil {
		return s.rep, err
	}
	s.say("worker", "call %s orders.create (retry, attempt 2): %s %s", retry.CallID, res.Status, res.Output)
	orders, err := s.tools.Orders(ctx)
	if err != nil {
		return s.rep, err
	}
	s.say("", "orders.create found order %s under key %s: %d order record(s)", orderRec.OrderID, plan.Key, len(orders))

	// 10. The payment: non-idempotent, so no plan without a review.
	if _, err := s.prepare(ctx, PaymentSession, pay.CallID); schema.CodeOf(err) != schema.CodeNeedsReview {
		return s.rep, fmt.Errorf("%w: prepare of the payment before any review: %v (want needs_review)", ErrStory, err)
	}
	s.say("host", "retry %s: refused, needs_review (a non-idempotent call that may have run)", pay.CallID)

	// 11. The reviewer checks the ledger and signs what it shows.
	ledger, err := s.tools.Ledger(ctx)
	if err != nil {
		return s.rep, err
	}
	verdict, evidence := schema.VerdictNotExecuted, fmt.Sprintf("ledger %s: no entry for call %s", "TOOLS_LEDGER", pay.CallID)
	for _, ch := range ledger {
		if ch.CallID == pay.CallID {
			verdict, evidence = schema.VerdictCompleted, fmt.Sprintf("ledger TOOLS_LEDGER seq %d: %d cents to %s by call %s", ch.Seq, ch.AmountCents, ch.Account, ch.CallID)
		}
	}
	s.rep.PaymentVerdict = verdict
	rv, err := recovery.SignReview(kp, schema.Review{V: schema.Version, Session: PaymentSession, CallID: pay.CallID,
		Operator: "demo-reviewer@ops", Evidence: evidence, Verdict: verdict, At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return s.rep, err
	}
	b, _ := json.Marshal(rv)
	reviewer, err := jetstream.New(s.roles[access.RoleReviewer])
	if err != nil {
		return s.rep, err
	}
	if _, err := reviewer.Publish(ctx, s.topo.Names().ReviewsSubject(PaymentSession), b); err != nil {
		return s.rep, fmt.Errorf("publish review: %w", err)
	}
	s.say("review", "demo-reviewer@ops checks the ledger: %s\nsigns verdict %s with %s..., published on %s", evidence, verdict, pub[:12], s.topo.Names().ReviewsSubject(PaymentSession))

	// 12. The payment's retry, or its refusal.
	pplan, err := s.prepare(ctx, PaymentSession, pay.CallID)
	switch {
	case verdict == schema.VerdictCompleted:
		if schema.CodeOf(err) != schema.CodeCompleted {
			return s.rep, fmt.Errorf("%w: prepare after a completed review: plan %+v, %v (want completed)", ErrStory, pplan, err)
		}
		s.rep.PaymentRetry = "refused (completed)"
		s.say("host", "retry %s: refused, completed: the charge happened; no second charge and no invented result", pay.CallID)
	case err != nil:
		return s.rep, fmt.Errorf("prepare the payment's retry after a not_executed review: %w", err)
	default:
		s.say("host", "retry %s: plan %s (basis %s)", pay.CallID, pplan.PlanID, pplan.Basis)
		pr, pres, err := s.waitPlanRun(ctx, PaymentSession, pplan.PlanID)
		if err != nil {
			return s.rep, err
		}
		s.rep.PaymentRetry = string(pres.Status)
		s.say("worker", "call %s payments.charge (retry, attempt 2): %s %s", pr.CallID, pres.Status, pres.Output)
	}

	// 13. The table.
	if err := s.table(ctx); err != nil {
		return s.rep, err
	}
	// 14. An approval that survives a crash (approval.go), then stop
	// everything.
	if err := s.approvals(ctx, approver, w2, w2Args); err != nil {
		return s.rep, err
	}
	s.procs.stopAll(5 * time.Second)
	fmt.Fprintln(s.out)
	s.say("stop", "%d child processes stopped, server shut down; the story took %.1fs", len(s.rep.Children), time.Since(t0).Seconds())
	return s.rep, nil
}

// connect opens a connection to the demo's server as role r.
func (s *story) connect(r access.Role) (*nats.Conn, error) {
	kp, err := s.keys.KeyPair(r)
	if err != nil {
		return nil, err
	}
	return s.srv.Connect(nats.Name("jingwei demo "+string(r)), natsnode.NkeyOption(kp))
}

// publicArgs drops the flags every child gets (server, credentials, log
// format) from a command line, for the story.
func publicArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--server" || args[i] == "--auth" || args[i] == "--log-format" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func sessionOf(c, order *schema.Call) string {
	if c == order {
		return OrderSession
	}
	return PaymentSession
}

// reviewerKey creates the demo reviewer's nkey and the trusted reviewers
// file naming it.
func (s *story) reviewerKey() (nkeys.KeyPair, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	if err := os.WriteFile(filepath.Join(s.dir, "reviewer.nk"), append(seed, '\n'), 0o600); err != nil {
		return nil, "", err
	}
	trust := filepath.Join(s.dir, "trusted-reviewers")
	if err := os.WriteFile(trust, []byte("# the demo reviewer\n"+pub+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	return kp, trust, nil
}

// waitService waits until the recovery worker's service answers.
func (s *story) waitService(ctx context.Context) error {
	ctx, cancel := s.step(ctx)
	defer cancel()
	return s.procs.waitReady(ctx, "the recovery worker's service (jw.api.status)", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		_, err := s.host().Status(rctx, service.StatusRequest{})
		return err == nil
	}, s.dead)
}

// waitStarted waits for the tool.call of a request and its start (a
// tool.started, or the tool.call itself in the combined form).
func (s *story) waitStarted(ctx context.Context, session, requestID string) (*schema.Call, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var c *schema.Call
	err := s.watch.wait(ctx, "the start of request "+requestID, s.check, func() bool {
		c = s.watch.callByRequest(session, requestID)
		return c != nil && c.Operation != nil && s.watch.started(session, c.CallID)
	})
	return c, err
}

// waitOrder waits until orders.create wrote the order of an operation key.
func (s *story) waitOrder(ctx context.Context, key string) (tools.Order, error) {
	return waitRecord(ctx, s, "the order record of key "+key, s.tools.Orders,
		func(o tools.Order) bool { return o.Key == key })
}

// waitCharge waits until payments.charge wrote the ledger entry of a call.
func (s *story) waitCharge(ctx context.Context, callID string) (tools.Charge, error) {
	return waitRecord(ctx, s, "the ledger entry of call "+callID, s.tools.Ledger,
		func(c tools.Charge) bool { return c.CallID == callID })
}

// waitRecord waits, within a step, until list returns a record that match
// accepts (a list error counts as not yet), and returns that record.
func waitRecord[T any](ctx context.Context, s *story, what string, list func(context.Context) ([]T, error), match func(T) bool) (T, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var found T
	err := s.procs.waitReady(ctx, what, func() bool {
		records, err := list(ctx)
		if err != nil {
			return false
		}
		for _, r := range records {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	}, s.dead)
	return found, err
}

// waitAssessment waits for the assessment the recovery worker publishes
// after taking the call's session over.
func (s *story) waitAssessment(ctx context.Context, c *schema.Call) (schema.Assessment, schema.Fence, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StepTimeout+s.cfg.LeaseTTL)
	defer cancel()
	session := PaymentSession
	if c.Tool == tools.OrdersCreate {
		session = OrderSession
	}
	var (
		a schema.Assessment
		f schema.Fence
	)
	err := s.watch.wait(ctx, "the recovery worker's assessment of call "+c.CallID, s.check, func() bool {
		var ok bool
		a, ok = s.watch.assessment(c.CallID)
		fp := s.watch.fenced(session)
		if fp != nil {
			f = *fp
		}
		return ok && fp != nil
	})
	return a, f, err
}

// waitPlanRun waits for the attempt that took a plan and its result.
func (s *story) waitPlanRun(ctx context.Context, session, planID string) (*schema.Call, *schema.Result, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	var (
		c *schema.Call
		r *schema.Result
	)
	err := s.watch.wait(ctx, "the retry of plan "+planID, s.check, func() bool {
		c = s.watch.callByPlan(session, planID)
		if c == nil {
			return false
		}
		r = s.watch.result(session, c.CallID)
		return r != nil
	})
	return c, r, err
}

// prepare asks the recovery worker for a plan (jw.api.prepare).
func (s *story) prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	return s.host().Prepare(ctx, session, callID)
}

// host returns the client of the jingwei service on the host's
// connection: an error answer is a *schema.Error with its code.
func (s *story) host() *service.Client {
	return service.NewClient(s.roles[access.RoleHost], service.ClientConfig{Prefix: s.topo.Prefix})
}

// table prints the final table of calls and business records and fills the
// report.
func (s *story) table(ctx context.Context) error {
	for _, session := range []string{OrderSession, PaymentSession} {
		h, err := s.topo.Logs().Load(ctx, session)
		if err != nil {
			return err
		}
		attempt := map[string]int{}
		for _, ev := range h {
			if ev.Call == nil || ev.Call.Operation == nil {
				continue
			}
			c := ev.Call
			n := 1
			if c.Operation.Retry != nil {
				n = attempt[c.Operation.Retry.PriorCallID] + 1
			}
			attempt[c.CallID] = n
			row := CallRow{Session: session, CallID: c.CallID, Tool: c.Tool, Effect: c.Operation.Contract.Effect.String(), Attempt: n, Key: c.Operation.Key, Result: "none (killed)"}
			for _, e := range h {
				if e.Result != nil && e.Result.CallID == c.CallID {
					row.Result = string(e.Result.Status)
				}
			}
			a, err := recovery.Inspect(schema.Events(h), c.CallID)
			switch {
			case errors.Is(err, schema.ErrSupersededCall):
				row.Outcome, row.Decision = "superseded", "retried"
			case err != nil:
				row.Outcome, row.Decision = "error", string(schema.CodeOf(err))
			default:
				row.Outcome, row.Decision = string(a.Outcome), string(a.Decision)
			}
			if session == PaymentSession && n == 1 && s.rep.PaymentVerdict != "" {
				row.Decision += ", review: " + string(s.rep.PaymentVerdict)
			}
			s.rep.Calls = append(s.rep.Calls, row)
		}
	}
	orders, err := s.tools.Orders(ctx)
	if err != nil {
		return err
	}
	ledger, err := s.tools.Ledger(ctx)
	if err != nil {
		return err
	}
	s.rep.Orders, s.rep.Charges = len(orders), len(ledger)
	if len(orders) != 1 {
		return fmt.Errorf("%w: %d order records, want exactly 1", ErrStory, len(orders))
	}

	fmt.Fprintln(s.out)
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tCALL\tTOOL\tEFFECT\tATTEMPT\tRESULT\tOUTCOME\tDECISION")
	for _, r := range s.rep.Calls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Session, r.CallID, r.Tool, r.Effect, r.Attempt, r.Result, r.Outcome, r.Decision)
	}
	tw.Flush()
	fmt.Fprintln(s.out)
	tw = tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "order records:\t%d\n", len(orders))
	fmt.Fprintf(tw, "ledger charges:\t%d\n", len(ledger))
	fmt.Fprintf(tw, "payment verdict:\t%s\n", s.rep.PaymentVerdict)
	fmt.Fprintf(tw, "payment retry:\t%s\n", s.rep.PaymentRetry)
	return tw.Flush()
}
