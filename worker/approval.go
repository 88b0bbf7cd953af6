package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// ApprovalRule makes a tool's calls wait for a signed approval at
// admission stage approval (docs/protocol.md §17). The zero value asks for
// approval of every call and waits DefaultApprovalTimeout.
type ApprovalRule struct {
	// When decides, from a call's arguments (valid JSON that passed the
	// input schema), whether the call needs approval, e.g. a charge above
	// an amount. Nil means every call does. It must be deterministic and
	// safe for concurrent use.
	When func(args json.RawMessage) bool
	// Timeout is how long a call waits for its answer; then it ends
	// rejected at stage approval. Zero means DefaultApprovalTimeout.
	Timeout time.Duration
}

// DefaultApprovalTimeout is how long a call waits for approval when its
// tool's ApprovalRule names no Timeout.
const DefaultApprovalTimeout = 5 * time.Minute

// ApprovalAsker publishes the approval request of a call that starts
// waiting (normally *stream.Topology, on jw.approvals.<session>.request).
// The session log's approval.requested is the request of record; the
// published one tells approvers.
type ApprovalAsker interface {
	PublishApprovalRequest(ctx context.Context, a schema.AskedApproval) error
}

// stageAwaiting is what admit returns for a call its tool's rule sends to
// approval: the runtime parks it instead of refusing it.
const stageAwaiting schema.Stage = "awaiting"

// parked is a call waiting for approval. Its tool.call and
// approval.requested are on the log; no goroutine waits for it.
type parked struct {
	res      Result // CallID, Operation, CallSeq
	tool     string
	args     json.RawMessage
	deadline time.Time
	// budget is the budget stage's verdict on the call's own count,
	// decided when it parked (or, for a call parked by an earlier owner,
	// from its position in the history): "" admits.
	budgetStage schema.Stage
	budgetWhy   string
}

// wantsApproval reports whether t's rule sends this call to approval.
func wantsApproval(t *registered, args json.RawMessage) bool {
	rule := t.Approval
	return rule != nil && (rule.When == nil || rule.When(args))
}

func approvalTimeout(t *registered) time.Duration {
	if t.Approval != nil && t.Approval.Timeout > 0 {
		return t.Approval.Timeout
	}
	return DefaultApprovalTimeout
}

// loadApprovals fills the runtime's pending calls and stopped tasks from
// the history its log was opened on: a call an earlier owner parked is
// waited for again, never asked as a new call.
func (r *Runtime) loadApprovals() {
	r.pending = make(map[string]*parked)
	r.stopped = make(map[string]schema.Stop)
	if r.cfg.History == nil {
		return
	}
	ap := recovery.ApprovalsOf(r.cfg.History)
	maps := ap.Stopped
	for k, v := range maps {
		r.stopped[k] = v
	}
	if len(ap.Pending) == 0 {
		return
	}
	// The budget stage of a parked call decides on the call's own count:
	// the tool.call events of its task up to and including it.
	upTo := map[string]int64{}
	seen := map[string]int64{}
	for i := range r.cfg.History {
		if c := r.cfg.History[i].Call; c != nil && c.Operation != nil {
			seen[c.Operation.Task]++
			upTo[c.CallID] = seen[c.Operation.Task]
		}
	}
	for _, p := range ap.Pending {
		op := *p.Call.Call.Operation
		pc := &parked{res: Result{CallID: p.CallID, Tool: p.Tool, Operation: op, CallSeq: p.Call.Seq}, tool: p.Tool, args: p.Arguments, deadline: p.Deadline}
		if lim := r.limitOf(op.Task); lim > 0 && upTo[p.CallID] > lim {
			pc.budgetStage, pc.budgetWhy = schema.StageBudget, fmt.Sprintf("tool_calls %d over the limit %d for task %s", upTo[p.CallID], lim, op.Task)
		}
		r.pending[p.CallID] = pc
	}
}

// limitOf returns the tool_calls limit of task: the stored one when the
// counter can tell (stream.Budget.Get), else Config.BudgetLimit.
func (r *Runtime) limitOf(task string) int64 {
	if g, ok := r.cfg.Budget.(interface {
		Get(ctx context.Context, session, task string) (stream.Usage, error)
	}); ok {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.WriteTimeout)
		defer cancel()
		if u, err := g.Get(ctx, r.cfg.Session, task); err == nil {
			return u.Limit
		}
	}
	return r.cfg.BudgetLimit
}

// park records that a call waits for approval: approval.requested on the
// log (with the deadline), the request published for approvers, and the
// call kept in memory until Resume, Expire or StopTask ends it. The
// returned error is approval_pending, with the call id: the call is
// recorded and not finished.
func (r *Runtime) park(ctx context.Context, t *registered, a Admission, usage func() (stream.Usage, error), res Result) (Result, error) {
	pc := &parked{res: res, tool: a.Tool, args: a.Arguments}
	u, err := usage() // this call's own count: decided now, applied after the approval
	switch {
	case err != nil && Transient(err):
		// As in CallWithOptions: jw_budget unavailable is not a refusal.
		// Nothing more is written; the call stays open with its start
		// marker and no approval.requested (not_started after the fence).
		r.sessionLog().Error().Err(err).Str("call_id", res.CallID).Msg("budget unavailable; call left open (not started), not rejected")
		return res, &schema.Error{Code: schema.CodeLog, CallID: res.CallID, Message: "budget unavailable, call not started: " + err.Error(), Err: err}
	case err != nil:
		pc.budgetStage, pc.budgetWhy = schema.StageBudget, "budget unavailable: "+err.Error()
	case u.Over():
		pc.budgetStage, pc.budgetWhy = schema.StageBudget, fmt.Sprintf("tool_calls %d over the limit %d for task %s", u.ToolCalls, u.Limit, a.Operation.Task)
	}
	pc.deadline = r.cfg.Now().UTC().Add(approvalTimeout(t)).Truncate(time.Second)
	if _, err := r.append(ctx, schema.Event{Type: schema.TypeApprovalRequested, ApprovalRequest: &schema.ApprovalRequest{CallID: res.CallID, Deadline: pc.deadline}}); err != nil {
		r.sessionLog().Error().Err(err).Str("call_id", res.CallID).Msg("approval.requested not recorded")
		return res, err
	}
	r.amu.Lock()
	r.pending[res.CallID] = pc
	r.amu.Unlock()
	r.ask(ctx, pc)
	r.sessionLog().Info().Str("call_id", res.CallID).Str("tool", a.Tool).Time("deadline", pc.deadline).Msg("call waits for approval")
	return res, &schema.Error{Code: schema.CodeApprovalPending, CallID: res.CallID, Message: fmt.Sprintf("call %s of %s waits for approval until %s", res.CallID, a.Tool, pc.deadline.Format(time.RFC3339))}
}

// ask publishes pc's approval request, best effort: the log holds it.
func (r *Runtime) ask(ctx context.Context, pc *parked) {
	if r.cfg.Approvals == nil {
		return
	}
	digest, err := schema.ArgsDigest(pc.args)
	if err != nil {
		return
	}
	wctx, cancel := r.writeContext(ctx)
	defer cancel()
	if err := r.cfg.Approvals.PublishApprovalRequest(wctx, schema.AskedApproval{
		Session: r.cfg.Session, CallID: pc.res.CallID, Task: pc.res.Operation.Task, Tool: pc.tool,
		Arguments: json.RawMessage(pc.args), ArgsDigest: digest, Deadline: pc.deadline, At: r.cfg.Now().UTC(),
	}); err != nil {
		r.sessionLog().Warn().Err(err).Str("call_id", pc.res.CallID).Msg("approval request not published (approval.requested is on the log)")
	}
}

// AskAgain publishes again the approval requests of every call waiting
// (for a new owner: the request of a call parked by a crashed one may not
// have been published). Each request has a Msg-Id of its call: published
// once per dedup window.
func (r *Runtime) AskAgain(ctx context.Context) {
	for _, pc := range r.pendingList() {
		r.ask(ctx, pc)
	}
}

func (r *Runtime) pendingList() []*parked {
	r.amu.Lock()
	defer r.amu.Unlock()
	out := make([]*parked, 0, len(r.pending))
	for _, pc := range r.pending {
		out = append(out, pc)
	}
	slices.SortFunc(out, func(a, b *parked) int { return int(a.res.CallSeq) - int(b.res.CallSeq) })
	return out
}

// Waiting describes a call waiting for approval (Runtime.Waiting).
type Waiting struct {
	CallID   string
	Tool     string
	Task     string
	Deadline time.Time
}

// Waiting returns the calls waiting for approval, in log order.
func (r *Runtime) Waiting() []Waiting {
	var out []Waiting
	for _, pc := range r.pendingList() {
		out = append(out, Waiting{CallID: pc.res.CallID, Tool: pc.tool, Task: pc.res.Operation.Task, Deadline: pc.deadline})
	}
	return out
}

// NextDeadline returns the earliest deadline of the calls waiting for
// approval (ok false when none waits): the one timer a host needs to call
// Expire on time.
func (r *Runtime) NextDeadline() (time.Time, bool) {
	r.amu.Lock()
	defer r.amu.Unlock()
	var next time.Time
	for _, pc := range r.pending {
		if next.IsZero() || pc.deadline.Before(next) {
			next = pc.deadline
		}
	}
	return next, !next.IsZero()
}

// take removes and returns the waiting call callID: whoever takes it
// answers it, once.
func (r *Runtime) take(callID string) *parked {
	r.amu.Lock()
	defer r.amu.Unlock()
	pc := r.pending[callID]
	delete(r.pending, callID)
	return pc
}

// Expire ends every call whose deadline is at or before now: rejected at
// stage approval ("no answer within …"). It returns the results recorded.
func (r *Runtime) Expire(ctx context.Context, now time.Time) []Result {
	var out []Result
	for _, pc := range r.pendingList() {
		if pc.deadline.After(now) || r.take(pc.res.CallID) == nil {
			continue
		}
		res, _ := r.reject(ctx, pc, schema.StageApproval, "no approval before the deadline "+pc.deadline.Format(time.RFC3339))
		out = append(out, res)
	}
	return out
}

// Resume answers a waiting call with a signed approval or denial,
// received at received (the answer's stream timestamp; zero means now).
// An answer that is not for a call waiting here (unknown, answered
// already — a replay —, or for another call or session), unsigned or not
// signed by a trusted approver (Config.TrustedApprovers) is refused with
// invalid_approval and changes nothing. An answer received after the
// deadline ends the call rejected at stage approval, like the timeout; a
// denial ends it rejected at approval; an approval records
// approval.granted (with the signed approval), then runs the budget stage,
// tool.started and the body, exactly once. Results and errors are those of
// CallWithOptions.
func (r *Runtime) Resume(ctx context.Context, a schema.Approval, received time.Time) (Result, error) {
	if r.fenced.Load() {
		return Result{}, &schema.Error{Code: schema.CodeFenced, Message: "session " + r.cfg.Session + " was taken over", Err: stream.ErrFenced}
	}
	if err := recovery.VerifyApproval(a, r.cfg.Session, a.CallID, r.cfg.TrustedApprovers); err != nil {
		return Result{}, err
	}
	pc := r.take(a.CallID)
	if pc == nil {
		return Result{}, schema.Errorf(schema.CodeInvalidApproval, "call %q of session %s does not wait for approval (answered already, never asked, or another call's): an approval is honoured once, for its own call", a.CallID, r.cfg.Session)
	}
	ctx, endApproval := r.startApprovalSpan(ctx, a, pc.res.CallSeq)
	defer endApproval()
	if received.IsZero() {
		received = r.cfg.Now()
	}
	if received.After(pc.deadline) {
		return r.reject(ctx, pc, schema.StageApproval, fmt.Sprintf("%s by %s came after the deadline %s", a.Decision, a.Approver, pc.deadline.Format(time.RFC3339)))
	}
	if a.Decision == schema.Denied {
		why := "denied by " + a.Approver
		if a.Reason != "" {
			why += ": " + a.Reason
		}
		return r.reject(ctx, pc, schema.StageApproval, why)
	}
	t := r.cfg.Registry.lookup(pc.tool)
	if t == nil {
		return r.reject(ctx, pc, schema.StageApproval, "tool "+pc.tool+" is no longer registered")
	}
	if _, err := r.append(ctx, schema.Event{Type: schema.TypeApprovalGranted, Approval: &a}); err != nil {
		r.sessionLog().Error().Err(err).Str("call_id", a.CallID).Msg("approval.granted not recorded; body not run")
		return pc.res, err
	}
	r.sessionLog().Info().Str("call_id", a.CallID).Str("approver", a.Approver).Msg("approved")
	if pc.budgetStage != "" {
		return r.reject(ctx, pc, pc.budgetStage, pc.budgetWhy)
	}
	if err := ctx.Err(); err != nil {
		return r.reject(ctx, pc, schema.StageBudget, "caller gone before the body started: "+err.Error())
	}
	return r.startAndRun(ctx, t, pc.args, pc.res)
}

// reject ends a waiting call rejected at stage.
func (r *Runtime) reject(ctx context.Context, pc *parked, stage schema.Stage, why string) (Result, error) {
	res := pc.res
	res.Status, res.Stage, res.Error = schema.StatusRejected, stage, why
	r.sessionLog().Info().Str("call_id", res.CallID).Str("stage", string(stage)).Str("reason", why).Msg("call rejected")
	return r.finish(ctx, res, &schema.Error{Code: schema.CodeRejected, Stage: stage, CallID: res.CallID, Message: why})
}

// Stopped reports whether task was stopped (task.stopped on the log).
func (r *Runtime) Stopped(task string) (schema.Stop, bool) {
	r.amu.Lock()
	defer r.amu.Unlock()
	s, ok := r.stopped[task]
	return s, ok
}

// StopTask stops task: task.stopped (by "host" or "budget", with reason)
// on the log, then every call of the task waiting for approval ends
// rejected at stage approval. From then on a call of the task is refused
// with task_stopped before anything is recorded or counted; its budget is
// never restored. Stopping a stopped task records nothing more.
func (r *Runtime) StopTask(ctx context.Context, task, by, reason string) error {
	if !schema.ValidSession(task) {
		return &schema.Error{Code: schema.CodeInvalidCall, Message: fmt.Sprintf("task %q must be 1-128 bytes of [A-Za-z0-9_-]", task)}
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	if _, ok := r.Stopped(task); ok {
		return nil
	}
	st := schema.Stop{Task: task, By: by, Reason: reason}
	if _, err := r.append(ctx, schema.Event{Type: schema.TypeTaskStopped, Stop: &st}); err != nil {
		return err
	}
	r.amu.Lock()
	r.stopped[task] = st
	r.amu.Unlock()
	r.sessionLog().Info().Str("task", task).Str("by", by).Str("reason", reason).Msg("task stopped")
	for _, pc := range r.pendingList() {
		if pc.res.Operation.Task == task && r.take(pc.res.CallID) != nil {
			_, _ = r.reject(ctx, pc, schema.StageApproval, "task "+task+" was stopped")
		}
	}
	return nil
}

// refuseStopped refuses a call of a stopped task before anything is
// recorded.
func (r *Runtime) refuseStopped(task string) error {
	if st, ok := r.Stopped(task); ok {
		return schema.Errorf(schema.CodeTaskStopped, "task %s of session %s was stopped (by %s): no new calls", task, r.cfg.Session, st.By)
	}
	return nil
}
