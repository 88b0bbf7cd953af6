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

	url, auth   string        // the server's URL and key directory, for the children
	reviewer    nkeys.KeyPair // the reviewer's key, trusted by the recovery worker
	reviewerPub string
	killedAt    time.Time // when the story killed the tool worker

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
	verdicts := map[string]schema.Verdict{PaymentSession: s.rep.PaymentVerdict}
	if u := s.rep.Undecided; u != nil {
		verdicts[SlowSession] = u.Verdict
	}
	for _, session := range []string{OrderSession, PaymentSession, SlowSession} {
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
			if session == SlowSession {
				row.Result = "none"
			}
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
			if v := verdicts[session]; n == 1 && v != "" {
				row.Decision += ", review: " + string(v)
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
	fmt.Fprintf(tw, "payment settled by:\t%s\n", s.rep.PaymentSettledBy)
	fmt.Fprintf(tw, "payment retry:\t%s\n", s.rep.PaymentRetry)
	if u := s.rep.Undecided; u != nil {
		fmt.Fprintf(tw, "slow payment probe:\t%s (evidence only)\n", u.ProbeVerdict)
		fmt.Fprintf(tw, "slow payment verdict:\t%s\n", u.Verdict)
		fmt.Fprintf(tw, "slow payment settled by:\t%s\n", u.SettledBy)
		fmt.Fprintf(tw, "slow payment retry:\t%s\n", u.Retry)
	}
	return tw.Flush()
}
