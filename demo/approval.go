package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/internal/proc"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/tools"
)

// The approval part of the story (docs/protocol.md §17): a payment above
// ApprovalAbove cents waits for a signed approval; the tool worker is
// killed while it waits; the approver approves while no worker runs; a
// fresh worker takes the session over and charges exactly once.
const (
	ApprovalSession = "demo-approvals"
	ApprovalRequest = "r-pay-big"
	// ApprovalAbove is the amount (cents) above which payments.charge waits
	// for approval in the demo's later tool workers.
	ApprovalAbove = 100000
)

var bigPaymentArgs = json.RawMessage(`{"account":"acct-7","amount_cents":250000}`)

// ApprovalReport is what became of the approval part of the story.
type ApprovalReport struct {
	// CallID is the payment that waited for approval.
	CallID string `json:"call_id"`
	// Killed is the tool worker killed while the call waited.
	Killed int `json:"killed_pid"`
	// Result is the call's result status once approved ("ok").
	Result string `json:"result"`
	// Calls counts the tool.call events of the session (1: never asked
	// again as a new call); Granted the approval.granted events (1); Charges
	// the ledger entries of the call (1).
	Calls   int `json:"calls"`
	Granted int `json:"granted"`
	Charges int `json:"charges"`
}

// approverKey makes the demo approver's key and the trusted-approvers file
// the later tool workers read; it returns the worker flags that turn
// approvals on.
func (s *story) approverKey() (nkeys.KeyPair, []string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, err
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	if err := os.WriteFile(filepath.Join(s.dir, "approver.nk"), append(seed, '\n'), 0o600); err != nil {
		return nil, nil, err
	}
	trust := filepath.Join(s.dir, "trusted-approvers")
	if err := os.WriteFile(trust, []byte("# the demo approver\n"+pub+"\n"), 0o644); err != nil {
		return nil, nil, err
	}
	return kp, []string{"--require-approval", fmt.Sprintf("%s:amount_cents>%d", tools.PaymentsCharge, ApprovalAbove), "--trust-approvers", trust}, nil
}

// approvals tells the approval part: w is the running tool worker (started
// with the approval flags, args its command line), killed while the call
// waits.
func (s *story) approvals(ctx context.Context, kp nkeys.KeyPair, w *proc.Child, args []string) error {
	fmt.Fprintln(s.out)
	rep := &ApprovalReport{}
	s.rep.Approval = rep
	agent, err := jetstream.New(s.roles[access.RoleAgent])
	if err != nil {
		return err
	}
	q := schema.Request{V: schema.Version, RequestID: ApprovalRequest, Session: ApprovalSession, Task: Task, Tool: tools.PaymentsCharge, Arguments: bigPaymentArgs}
	b, _ := json.Marshal(q)
	if _, err := agent.Publish(ctx, s.topo.Names().RequestsSubject(q.Session), b, jetstream.WithMsgID(stream.RequestMsgIDOf(q))); err != nil {
		return fmt.Errorf("publish request %s: %w", q.RequestID, err)
	}
	s.say("agent", "request %-10s %s %s: above %d cents, it needs a signed approval", q.RequestID, q.Tool, q.Arguments, ApprovalAbove)

	var c *schema.Call
	var deadline time.Time
	wctx, cancel := s.step(ctx)
	err = s.watch.wait(wctx, "the payment waiting for approval", s.check, func() bool {
		c = s.watch.callByRequest(ApprovalSession, ApprovalRequest)
		if c == nil {
			return false
		}
		for _, ev := range s.watch.events[ApprovalSession] { // cond runs under the watcher's lock
			if ev.ApprovalRequest != nil && ev.ApprovalRequest.CallID == c.CallID {
				deadline = ev.ApprovalRequest.Deadline
				return true
			}
		}
		return false
	})
	cancel()
	if err != nil {
		return err
	}
	rep.CallID = c.CallID
	s.say("worker", "call %s payments.charge recorded, approval.requested (deadline %s): parked, no thread waits for it", c.CallID, deadline.Format(time.TimeOnly))

	w.Kill()
	s.dead[w] = true
	rep.Killed = w.PID()
	s.say("CRASH", "SIGKILL tool worker pid %d while the call waits for approval", w.PID())

	a, err := recovery.SignApproval(kp, schema.Approval{V: schema.Version, Session: ApprovalSession, CallID: c.CallID, Decision: schema.Approved,
		Approver: "demo-approver@finance", Reason: "invoice 2026-118", At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	approver, err := jetstream.New(s.roles[access.RoleReviewer])
	if err != nil {
		return err
	}
	if err := stream.PublishApproval(ctx, approver, s.topo.Prefix, a); err != nil {
		return err
	}
	s.say("approve", "demo-approver@finance approves call %s (signed), published on %s while no tool worker runs", c.CallID, s.topo.Names().ApprovalsSubject(ApprovalSession))

	w3, err := s.start("worker-3", args...)
	if err != nil {
		return err
	}
	s.say("start", "tool worker      pid %-6d jingwei worker (takes the partition, and its session, once the old lease expires)", w3.PID())
	var r *schema.Result
	wctx, cancel = context.WithTimeout(ctx, s.cfg.StepTimeout+s.cfg.LeaseTTL)
	err = s.watch.wait(wctx, "the approved payment's result", s.check, func() bool {
		r = s.watch.result(ApprovalSession, c.CallID)
		return r != nil
	})
	cancel()
	if err != nil {
		return err
	}
	rep.Result = string(r.Status)
	h, err := s.topo.Logs().Load(ctx, ApprovalSession)
	if err != nil {
		return err
	}
	for _, ev := range h {
		switch ev.Type {
		case schema.TypeCall:
			rep.Calls++
		case schema.TypeApprovalGranted:
			rep.Granted++
		}
	}
	ledger, err := s.tools.Ledger(ctx)
	if err != nil {
		return err
	}
	for _, ch := range ledger {
		if ch.CallID == c.CallID {
			rep.Charges++
		}
	}
	s.say("worker", "the new owner resumes waiting, finds the approval and honours it once: call %s %s %s", c.CallID, r.Status, r.Output)
	s.say("", "%d tool.call (never asked again as a new call), %d approval.granted, %d ledger entry for the call", rep.Calls, rep.Granted, rep.Charges)
	if r.Status != schema.StatusOK || rep.Calls != 1 || rep.Granted != 1 || rep.Charges != 1 {
		return fmt.Errorf("%w: approved payment: result %s, %d calls, %d approvals honoured, %d charges (want ok, 1, 1, 1)", ErrStory, r.Status, rep.Calls, rep.Granted, rep.Charges)
	}
	return nil
}
