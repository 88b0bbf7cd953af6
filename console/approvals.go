package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// DefaultApprovalWait is how long the console waits, after publishing an
// answer to a call waiting for approval, for the session log to show the
// tool worker's outcome (approval.granted, or the call rejected at stage
// approval) before it reports the answer as not honoured.
const DefaultApprovalWait = 5 * time.Second

// approvalPoll is how often the console reads the session log while it
// waits for an answer's outcome.
const approvalPoll = 100 * time.Millisecond

// pendingView is one call waiting for approval, as the front page shows
// it: what jw.api.status says, the call's tool.call and the chain of its
// events from the session log.
type pendingView struct {
	service.WaitingApproval
	// Waited is how long it has waited, since its approval.requested.
	Waited   string
	Call     *schema.Call
	Args     string
	Chain    []eventView
	ChainErr *problem
}

// loadPending reads, for each call waiting for approval (at most
// MaxDetailed), its events from the session log (one load per session).
func (c *Console) loadPending(ctx context.Context, waiting []service.WaitingApproval) []pendingView {
	logs := map[string][]schema.Event{}
	errs := map[string]error{}
	var out []pendingView
	for _, w := range waiting {
		v := pendingView{WaitingApproval: w}
		h, ok := logs[w.Session]
		if _, failed := errs[w.Session]; !ok && !failed {
			var err error
			h, err = c.sessionLog(ctx, w.Session)
			if err != nil {
				errs[w.Session] = err
			}
			logs[w.Session] = h
		}
		v.ChainErr = newProblem(errs[w.Session])
		for _, ev := range h {
			if ev.CallID() != w.CallID {
				continue
			}
			if ev.ApprovalRequest != nil {
				v.Waited = waited(ev.At, time.Now())
			}
			v.Chain = append(v.Chain, viewEvent(ev))
			if ev.Call != nil {
				v.Call, v.Args = ev.Call, pretty(ev.Call.Arguments)
			}
		}
		out = append(out, v)
	}
	return out
}

// sessionLog loads a session's log on the host connection.
func (c *Console) sessionLog(ctx context.Context, session string) ([]schema.Event, error) {
	topo, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return topo.Logs().Load(lctx, session)
}

// approvalRecord is an answer to a call's approval request as its session
// log holds it: approval.granted (the signed approval the body started
// on), or the call's result rejected at stage approval (a denial, the
// deadline, a stopped task: the result's error says which).
type approvalRecord struct {
	Seq      uint64
	Granted  bool
	Approval *schema.Approval
	// Why is a rejection's reason (the result's error).
	Why string
}

// approvalState is what the console knows about a call's approval, from
// its session's log.
type approvalState struct {
	// Asked is set when the log holds the call's approval.requested.
	Asked bool
	// Waiting is set while the call waits (no answer, no result yet).
	Waiting  bool
	Deadline time.Time
	Records  []approvalRecord
	// Stopped is the task.stopped of the call's task, if any.
	Stopped *schema.Stop
}

// denied reports a call that ended rejected at stage approval.
func (st approvalState) denied() bool {
	for _, r := range st.Records {
		if !r.Granted {
			return true
		}
	}
	return false
}

// approvalOf reads a call's approval state from a session log.
func approvalOf(h []schema.Event, callID string) approvalState {
	var st approvalState
	task := ""
	for _, ev := range h {
		switch {
		case ev.Call != nil && ev.Call.CallID == callID && ev.Call.Operation != nil:
			task = ev.Call.Operation.Task
		case ev.ApprovalRequest != nil && ev.ApprovalRequest.CallID == callID:
			st.Asked, st.Deadline = true, ev.ApprovalRequest.Deadline
		case ev.Approval != nil && ev.Approval.CallID == callID && ev.Type == schema.TypeApprovalGranted:
			a := *ev.Approval
			st.Records = append(st.Records, approvalRecord{Seq: ev.Seq, Granted: true, Approval: &a})
		case ev.Result != nil && ev.Result.CallID == callID && st.Asked && ev.Result.Stage == schema.StageApproval:
			st.Records = append(st.Records, approvalRecord{Seq: ev.Seq, Why: ev.Result.Error})
		case ev.Stop != nil && task != "" && ev.Stop.Task == task:
			s := *ev.Stop
			st.Stopped = &s
		}
	}
	for _, p := range recovery.ApprovalsOf(h).Pending {
		if p.CallID == callID {
			st.Waiting = true
		}
	}
	return st
}

// checkApproval checks an answer signed in the browser before it is
// published: well formed, bound to this call, a signature that verifies
// under its signer's key (recovery.VerifyApproval), and a signer among the
// trusted approvers when the console knows them.
func (c *Console) checkApproval(session, call string, signed []byte) (schema.Approval, error) {
	a, err := schema.DecodeApproval(signed)
	if err != nil {
		return a, err
	}
	if strings.TrimSpace(a.Approver) == "" {
		return a, schema.Errorf(schema.CodeInvalidApproval, "the answer's approver is blank")
	}
	if err := recovery.VerifyApproval(a, session, call, recovery.TrustedKeys{a.Signer: {}}); err != nil {
		return a, err
	}
	if t := c.cfg.TrustedApprovers; t != nil && !t.Has(a.Signer) {
		return a, schema.Errorf(schema.CodeInvalidApproval, "the answer is signed by %s, which is not among the approvers the tool workers trust: they would refuse it", a.Signer)
	}
	return a, nil
}

// relayApproval checks an answer signed in the browser (checkApproval),
// publishes it as `jingwei approve`/`deny` do
// (service.Client.SubmitApproval) and waits, at most ApprovalWait, for the
// session log to show what the tool worker made of it.
func (c *Console) relayApproval(ctx context.Context, session, call string, signed []byte) flash {
	fl := flash{Kind: "approval"}
	a, err := c.checkApproval(session, call, signed)
	d := a.Decision
	refuse := func(title string, code schema.Code, msg, hint, result string) flash {
		fl.Title, fl.Code, fl.Message, fl.Hint = title, string(code), msg, hint
		c.cfg.Metrics.Answered(d, result)
		c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("decision", string(d)).Str("signer", a.Signer).Str("code", string(code)).Msg("console: answer not honoured")
		return fl
	}
	if err != nil {
		p := newProblem(err)
		hint := "Only an answer signed by a person's own key counts; the console signs nothing."
		if a.Signer != "" && c.cfg.TrustedApprovers != nil && !c.cfg.TrustedApprovers.Has(a.Signer) {
			hint = "Ask an administrator to add the line “" + a.Signer + " <your name>” to the approvers file the tool workers trust (worker --trust-approvers, <auth dir>/approvers)."
		}
		return refuse("Refused: nothing published", schema.Code(cmp.Or(p.Code, string(schema.CodeInvalidApproval))), p.Message, hint, "refused")
	}
	who := signedBy(c.approverName(a.Signer), a.Signer)
	// A call that does not wait would refuse the answer: say so before
	// publishing anything (an answer is bound to one waiting call).
	h, err := c.sessionLog(ctx, session)
	if err != nil {
		p := newProblem(err)
		return refuse("Refused: nothing published", schema.Code(p.Code), p.Message, "The console cannot read the session's log.", "refused")
	}
	before := approvalOf(h, call)
	if !before.Waiting {
		msg := fmt.Sprintf("call %s of session %s does not wait for approval", call, session)
		if len(before.Records) > 0 {
			msg += ": it was answered already (see its approvals on record)"
		} else if !before.Asked {
			msg += ": it never asked for approval"
		} else {
			msg += ": it has a result"
		}
		return refuse("Refused: nothing published", schema.CodeInvalidApproval, msg, "An answer is honoured once, for its own waiting call; a retry asks again as a new call.", "late")
	}
	rc, err := c.reviewer.SubmitApproval(ctx, a)
	if err != nil {
		p := newProblem(err)
		return refuse("Refused: nothing published", schema.Code(p.Code), p.Message, p.Hint, "refused")
	}
	c.cfg.Logger.Info().Str("session", session).Str("call_id", call).Str("decision", string(d)).Str("signer", a.Signer).Str("name", c.cfg.ApproverNames.Name(a.Signer)).Msg("console: answer published")
	// What the tool worker made of it, as the session log says.
	deadline := time.Now().Add(c.cfg.ApprovalWait)
	for {
		h, err := c.sessionLog(ctx, session)
		if err == nil {
			st := approvalOf(h, call)
			if len(st.Records) > len(before.Records) {
				r := st.Records[len(st.Records)-1]
				fl.OK = true
				c.cfg.Metrics.Answered(d, "honoured")
				switch {
				case r.Granted:
					fl.Title = fmt.Sprintf("Approved by %s: approval.granted recorded (seq %d)", who, r.Seq)
					fl.Hint = "The tool worker starts the call's body now, once: its result appears in the chain below. The approval is bound to this call: a retry asks again."
				case d == schema.Denied:
					fl.Title = fmt.Sprintf("Denied by %s: the call ended rejected at stage approval (seq %d)", who, r.Seq)
					fl.Hint = "The body never ran. " + r.Why
				default:
					fl.OK = false
					fl.Title = "Approval published, but the call ended rejected at stage approval"
					fl.Code, fl.Message = string(schema.CodeRejected), r.Why
				}
				return fl
			}
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(approvalPoll):
		}
	}
	return refuse("Published, not honoured (yet)", schema.CodeApprovalPending,
		fmt.Sprintf("the answer is on %s, but after %s the session log shows no outcome: the call still waits", rc.Subject, c.cfg.ApprovalWait),
		"A tool worker refuses answers by keys outside its --trust-approvers (invalid_approval); or no tool worker runs now, and the next one to take the session honours a trusted answer once. Reload this page to see the outcome.",
		"unanswered")
}

// stoppedView is /stopped.
type stoppedView struct {
	Tasks []service.StoppedTask
	Err   *problem
}

func (c *Console) handleStopped(w http.ResponseWriter, r *http.Request) {
	var v stoppedView
	st, err := c.reviewer.Status(r.Context(), service.StatusRequest{Session: r.URL.Query().Get("session")})
	if err != nil {
		v.Err = newProblem(err)
	} else {
		v.Tasks = st.StoppedTasks
	}
	c.render(w, r, "stopped.html", page{Title: "Stopped tasks", Nav: "stopped", Data: v})
}
