// The pipeline of one call: CallWithOptions and its stages.

package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// CallWithOptions runs one attempt of tool with args through the canonical
// steps (see the package documentation) and returns what became of it. The
// error is nil exactly when the result is ok; otherwise it is a *schema.Error whose
// Code is the status ("failed", "timeout", …), "rejected" (with Stage), a
// plan refusal (nothing recorded, matches schema.ErrPlanRefused), or a reason
// nothing was recorded (unknown_tool, invalid_call, fenced, log_unavailable).
// Nil args mean {}.
//
// It is a pipeline of named stages, each a method that can be run alone:
// validateCall (nothing written), holdStop (the task is not stopped),
// identify (the call id and operation; a retry spends its plan), then
// admission and the tool.call in one of two orders — admitEarly and
// record (the combined form), or recordThenAdmit (the three-event form) —
// and last runAndFinish (the body, then tool.result) or refuse.
func (r *Runtime) CallWithOptions(ctx context.Context, tool string, args json.RawMessage, opts CallOptions) (Result, error) {
	c, err := r.validateCall(ctx, tool, args, opts)
	if err != nil {
		return Result{}, err
	}
	// The tracing hooks are called only while tracing is on (see
	// tracing.go).
	endStart := nop
	if tracing.Enabled() {
		ctx, endStart = r.startCallSpan(ctx, c.t, opts)
	}
	defer endStart()
	c.ctx = ctx
	// The read lock taken by holdStop is released once the tool.call is
	// on the log (record), or here on any return before it.
	defer c.stop.release()
	if err := r.holdStop(c); err != nil {
		return Result{}, err
	}
	if err := r.identify(ctx, c); err != nil {
		return Result{}, err
	}
	v, decided := r.admitEarly(ctx, c)
	if !decided {
		return r.recordThenAdmit(ctx, c)
	}
	if err := r.record(ctx, c, v.admitted()); err != nil {
		return Result{}, err
	}
	if !v.admitted() {
		return r.refuse(ctx, c.res, v.stage, v.why, c.logger(r))
	}
	return r.runAndFinish(ctx, c.t, c.args, c.res)
}

// call is one call on its way through CallWithOptions: what the caller
// asked, and what the stages have decided so far.
type call struct {
	t    *registered
	tool string
	args json.RawMessage
	task string
	opts CallOptions

	// ctx carries the call's trace span (for its log lines).
	ctx context.Context

	// stop is the read lock on the runtime's stopped tasks (holdStop).
	stop stopHold

	// wants says the call waits for an approval; decided once per call
	// (waitsForApproval), as a When rule is asked once.
	wants, wantsKnown bool

	// Set by identify.
	callID string
	op     schema.Operation
	res    Result
}

// logger returns the runtime's logger with the call's fields; it is built
// only when something is logged.
func (c *call) logger(r *Runtime) func() *zerolog.Logger {
	return func() *zerolog.Logger {
		lc := r.cfg.Logger.With().Str("session", r.cfg.Session).Str("call_id", c.callID).Str("tool", c.tool).Str("task", c.task).Str("op_key", c.op.Key)
		if c.ctx != nil {
			lc = tracing.LogContext(c.ctx, lc)
		}
		if c.op.Retry != nil {
			// A plan consumed by an attempt whose tool.call is then not
			// recorded leaves its prior call without a usable successor
			// plan: say which.
			lc = lc.Str("plan_id", c.op.Retry.PlanID)
		}
		l := lc.Logger()
		return &l
	}
}

// admission is what the admission stages are asked about the call (once
// identify has set its id and operation).
func (c *call) admission(r *Runtime) Admission {
	return Admission{
		Session: r.cfg.Session, CallID: c.callID, Tool: c.tool, Arguments: c.args,
		RequestID: c.opts.RequestID, ProviderCallID: c.opts.ProviderCallID, Operation: c.op,
	}
}

// waitsForApproval is approvalWait of the call, asked once.
func (c *call) waitsForApproval() bool {
	if !c.wantsKnown {
		c.wants, c.wantsKnown = approvalWait(c.t, c.args), true
	}
	return c.wants
}

// stopHold is a read lock on Runtime.smu that is released once: at the
// tool.call, or when CallWithOptions returns. It is used by one goroutine
// only, so a flag is enough (no sync.Once).
type stopHold struct {
	mu   *sync.RWMutex
	held bool
}

func (h *stopHold) hold(mu *sync.RWMutex) {
	mu.RLock()
	h.mu, h.held = mu, true
}

func (h *stopHold) release() {
	if h.held {
		h.held = false
		h.mu.RUnlock()
	}
}

// validateCall is the first stage: the checks that need nothing written
// and nothing counted — the runtime is not fenced, the tool is known, the
// arguments are JSON, the task and the caller's ids are well formed, the
// caller is still there. It settles the call's task: the caller's, a
// retry's plan's (verified against the issued plan by identify), or the
// runtime's default.
func (r *Runtime) validateCall(ctx context.Context, tool string, args json.RawMessage, opts CallOptions) (*call, error) {
	if r.fenced.Load() {
		return nil, &schema.Error{Code: schema.CodeFenced, Message: "session " + r.cfg.Session + " was taken over", Err: stream.ErrFenced}
	}
	t := r.cfg.Registry.lookup(tool)
	if t == nil {
		return nil, &schema.Error{Code: schema.CodeUnknownTool, Message: fmt.Sprintf("no tool %q", tool)}
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	task := opts.Task
	switch {
	case task == "" && opts.Retry != nil:
		task = opts.Retry.Task
	case task == "":
		task = r.cfg.DefaultTask
	}
	switch {
	case !json.Valid(args):
		return nil, &schema.Error{Code: schema.CodeInvalidCall, Message: "arguments are not valid JSON"}
	case !schema.ValidSession(task):
		return nil, &schema.Error{Code: schema.CodeInvalidCall, Message: fmt.Sprintf("task %q must be 1-128 bytes of [A-Za-z0-9_-]", task)}
	case len(opts.RequestID) > schema.MaxFieldBytes || len(opts.ProviderCallID) > schema.MaxFieldBytes:
		return nil, &schema.Error{Code: schema.CodeInvalidCall, Message: fmt.Sprintf("request_id or provider_call_id over %d bytes", schema.MaxFieldBytes)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &call{t: t, tool: tool, args: args, task: task, opts: opts}, nil
}

// holdStop takes the read lock on the stopped tasks and refuses a call of
// a stopped task: a stopped task records nothing more (a plan for it is
// not consumed either). The lock, held until the tool.call is on the log,
// keeps a task.stopped from coming between this check and the tool.call.
func (r *Runtime) holdStop(c *call) error {
	c.stop.hold(&r.smu)
	return r.refuseStopped(c.task)
}

// identify gives the call its id and operation (steps 1-2): for a new
// action a fresh call id and key; for a retry the issued plan's key,
// taken from jw_plans (the plan is spent here, after checking the log has
// room for the attempt, and refused if the log already holds a retry of
// its call).
func (r *Runtime) identify(ctx context.Context, c *call) error {
	if c.opts.Retry == nil {
		var key string
		c.callID, key = randomIDs("c-", "op-")
		c.op = schema.Operation{Task: c.task, Key: key, Contract: c.t.Metadata.Contract}
	} else if err := r.takePlan(ctx, c, *c.opts.Retry); err != nil {
		return err
	}
	c.res = Result{CallID: c.callID, Tool: c.tool, Operation: c.op}
	return nil
}

// takePlan spends the retry plan p for c and sets c's call id and
// operation from it.
func (r *Runtime) takePlan(ctx context.Context, c *call, p schema.Plan) error {
	callID := randomID("c-")
	if err := r.roomForCall(c.t, c.args, true); err != nil {
		return err
	}
	if id, ok := r.retriedBy(p.PriorCallID); ok {
		err := &schema.Error{Code: schema.CodePlanConsumed, Message: fmt.Sprintf("plan %s: the log already holds attempt %s of call %s", p.PlanID, id, p.PriorCallID), Err: stream.ErrPlanConsumed}
		r.cfg.Logger.Warn().Str("session", r.cfg.Session).Err(err).Str("tool", c.tool).Str("plan_id", p.PlanID).Msg("retry plan refused: its call was retried already (jw_plans says otherwise?)")
		return err
	}
	// Only a runtime that knows the confirmed history (retried != nil)
	// and holds a higher epoch than a consumer may complete its plan.
	r.rmu.Lock()
	known := r.retried != nil
	r.rmu.Unlock()
	taken, err := TakeOperation(ctx, r.cfg.Plans, Attempt{
		Session: r.cfg.Session, Task: c.task, Tool: c.tool, Arguments: c.args,
		Contract: c.t.Metadata.Contract, CallID: callID, Planners: r.cfg.TrustedPlanners,
		Epoch: r.epoch(), MayComplete: known, Prior: r.priorReader(),
	}, p)
	if err != nil {
		r.cfg.Logger.Info().Str("session", r.cfg.Session).Err(err).Str("tool", c.tool).Str("plan_id", p.PlanID).Msg("retry plan refused")
		return err
	}
	c.op, c.callID = taken.Operation, taken.CallID
	if taken.Completed {
		r.cfg.Logger.Info().Str("session", r.cfg.Session).Str("call_id", c.callID).Str("plan_id", p.PlanID).Msg("plan consumed by a fenced writer whose attempt never reached the log: completing that attempt")
	}
	return nil
}

// verdict is what admission decided: admitted (stage ""), refused at
// stage for why, parked (stageAwaiting), or undecided because the count
// failed transiently (err).
type verdict struct {
	stage schema.Stage
	why   string
	err   error
}

func (v verdict) admitted() bool { return v.stage == "" && v.err == nil }

// admitEarly runs admission before anything is written when no stage has
// to wait: the call wants no approval, and its task's count is deferred,
// so the budget stage decides from memory (counting the call there).
// decided is false when a stage would wait; the call then takes the
// three-event form (recordThenAdmit). A decided call is recorded with
// its start in one tool.call{started: true} if admitted: the combined
// form (docs/protocol.md §8), two appends per call.
func (r *Runtime) admitEarly(ctx context.Context, c *call) (v verdict, decided bool) {
	if c.waitsForApproval() {
		return verdict{}, false
	}
	u, ok := r.deferred(c.task)
	if !ok {
		return verdict{}, false
	}
	stage, why, _ := r.admit(ctx, c.t, c.admission(r), false, func() (stream.Usage, error) { return u, nil })
	return verdict{stage: stage, why: why}, true
}

// record appends the call's tool.call — with started set when the body
// is to run on its ack (the combined form), else with a start marker —
// and then releases the stop lock and notes a retry. The tool.call keeps
// room on the log for the call's start and result (stream.WithCallRoom):
// a call the log has no room to finish is refused (history_too_large)
// before anything is written.
func (r *Runtime) record(ctx context.Context, c *call, started bool) error {
	callCtx := stream.WithCallRoom(ctx, r.resultRoom(c.t))
	seq, err := r.append(callCtx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{
		CallID: c.callID, Tool: c.tool, Arguments: c.args,
		RequestID: c.opts.RequestID, ProviderCallID: c.opts.ProviderCallID,
		StartMarker: !started, Started: started, Operation: &c.op,
	}})
	if err != nil {
		msg := "tool.call not recorded"
		if started {
			msg = "tool.call not recorded; body not run"
		}
		c.logger(r)().Error().Err(err).Msg(msg)
		return err
	}
	c.res.CallSeq = seq
	c.stop.release()
	if c.op.Retry != nil {
		r.noteRetry(c.op.Retry.PriorCallID, c.callID)
	}
	return nil
}

// recordThenAdmit is the three-event form: record the attempt and count
// it, then admit it, then (if admitted) tool.started, the body and
// tool.result. The count is taken before or alongside the append (it is
// never refunded, so counting an attempt whose append then fails only
// errs on the safe side). From here on every write runs even if the
// caller goes away, each bounded by WriteTimeout. A call the log has no
// room for is refused before it is counted (a retry was checked before
// its plan was spent).
func (r *Runtime) recordThenAdmit(ctx context.Context, c *call) (Result, error) {
	if c.opts.Retry == nil {
		if err := r.roomForCall(c.t, c.args, false); err != nil {
			return Result{}, err
		}
	}
	budgetStage := r.count(ctx, c.task)
	// The call returns only once its count is written (or failed), on
	// every path: a refusal before the budget stage and a tool.call that
	// did not reach the log too, so a caller that returns, or a process
	// that exits after it, leaves no count in flight.
	defer budgetStage()
	if err := r.record(ctx, c, false); err != nil {
		return Result{}, err
	}
	stage, why, infraErr := r.admit(ctx, c.t, c.admission(r), c.waitsForApproval(), budgetStage)
	switch {
	case infraErr != nil:
		// jw_budget stayed unavailable for the whole WriteTimeout: not a
		// refusal of the call. Nothing more is written (the body has not
		// started, tool.started is not on the log), so the call stays open
		// with its start marker: the session's next owner fences it and it
		// is assessed not_started, retry_allowed.
		c.logger(r)().Error().Err(infraErr).Msg("budget unavailable; call left open (not started), not rejected")
		return c.res, &schema.Error{Code: schema.CodeLog, CallID: c.callID, Message: "budget unavailable, call not started: " + infraErr.Error(), Err: infraErr}
	case stage == stageAwaiting:
		return r.park(ctx, c.t, c.admission(r), budgetStage, c.res)
	case stage != "":
		return r.refuse(ctx, c.res, stage, why, c.logger(r))
	}
	return r.startAndRun(ctx, c.t, c.args, c.res)
}

// approvalWait reports, before anything is written, whether the call
// will wait for an approval at stage approval: wantsApproval, asked only
// of arguments that pass the input schema (ApprovalRule.When is promised
// no others). Arguments that do not pass never reach the approval stage
// (admission refuses them at stage arguments, or earlier), so they wait
// for nothing. A tool with a When rule has its arguments validated twice
// per call (here and at stage arguments).
func approvalWait(t *registered, args json.RawMessage) bool {
	switch rule := t.Approval; {
	case rule == nil:
		return false
	case rule.When != nil && t.validate(args) != nil:
		return false
	}
	return wantsApproval(t, args)
}

// refuse appends the tool.result{rejected, stage} of a refused call whose
// tool.call is on the log (and, for a task out of tool_calls with
// StopExhaustedTasks, its task.stopped).
func (r *Runtime) refuse(ctx context.Context, res Result, stage schema.Stage, why string, lg func() *zerolog.Logger) (Result, error) {
	res.Status, res.Stage, res.Error = schema.StatusRejected, stage, why
	lg().Info().Str("stage", string(stage)).Str("reason", why).Msg("call rejected")
	out, err := r.finish(ctx, res, &schema.Error{Code: schema.CodeRejected, Stage: stage, CallID: res.CallID, Message: why})
	if stage == schema.StageBudget && r.cfg.StopExhaustedTasks && strings.HasPrefix(why, "tool_calls ") {
		if serr := r.StopTask(ctx, res.Operation.Task, schema.StoppedByBudget, why); serr != nil {
			lg().Warn().Err(serr).Msg("task.stopped not recorded")
		}
	}
	return out, err
}

// startAndRun is steps 5 and 6 of an admitted call in the three-event
// form: tool.started, the body only after its ack, then tool.result.
func (r *Runtime) startAndRun(ctx context.Context, t *registered, args json.RawMessage, res Result) (Result, error) {
	// Step 5: tool.started, and only after its ack the body.
	if _, err := r.append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: res.CallID}}); err != nil {
		r.callLog(t, res).Error().Err(err).Msg("tool.started not recorded; body not run")
		return res, err
	}
	return r.runAndFinish(ctx, t, args, res)
}

// callLog returns the runtime's logger with the call's fields.
func (r *Runtime) callLog(t *registered, res Result) *zerolog.Logger {
	l := r.sessionLog().With().Str("call_id", res.CallID).Str("tool", t.Metadata.Name).Str("task", res.Operation.Task).Str("op_key", res.Operation.Key).Logger()
	return &l
}

// runAndFinish runs the body of a call whose start is on the log (a
// tool.started, or its tool.call in the combined form) and appends its
// tool.result (step 6).
func (r *Runtime) runAndFinish(ctx context.Context, t *registered, args json.RawMessage, res Result) (Result, error) {
	if tracing.Enabled() {
		ctx = started(ctx)
	}
	callID, op, tool := res.CallID, res.Operation, t.Metadata.Name
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = r.cfg.DefaultTimeout
	}
	limit := r.outputLimit(t)
	fence := Fence{Session: r.cfg.Session, Epoch: r.epoch(), CallID: callID, Task: op.Task, Key: op.Key}
	req := BodyRequest{
		Session: r.cfg.Session, CallID: callID, Tool: tool, Arguments: args,
		Operation: Operation{Task: op.Task, Key: op.Key, Contract: op.Contract},
		Fence:     fence,
	}
	// RunToolCall covers the body and the tool.result's append.
	endRun := nopResult
	if tracing.Enabled() {
		ctx, endRun = r.startRunSpan(ctx, t, req)
	}
	r.run(WithFence(ctx, fence), t, req, timeout, limit, &res)

	// Step 6: tool.result.
	var callErr error
	if res.Status != schema.StatusOK {
		callErr = &schema.Error{Code: schema.Code(res.Status), CallID: callID, Message: res.Error}
		r.callLog(t, res).Info().Str("status", string(res.Status)).Str("error", res.Error).Msg("call did not complete")
	}
	out, err := r.finish(ctx, res, callErr)
	endRun(&out)
	return out, err
}
