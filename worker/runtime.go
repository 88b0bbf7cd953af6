package worker

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Appender is what the runtime needs from a session log: append one event
// and return its stream sequence once it is acknowledged. *stream.Log
// implements it; it must return an error matching stream.ErrFenced once a
// newer writer took the session over.
type Appender interface {
	Append(ctx context.Context, ev schema.Event) (uint64, error)
}

// Counter counts tool calls per session and task; *stream.Budget implements
// it. Add counts one call and returns the usage after counting.
type Counter interface {
	Add(ctx context.Context, session, task string, limit int64) (stream.Usage, error)
}

// DeferringCounter is a Counter that can also count a call in memory and
// write it shortly after (Defer), and make a task's count cover the
// attempts found in the session's history (Reconcile); *stream.Budget
// implements it. With one, a runtime that knows what its log held when it
// was opened (Config.History, or an empty *stream.Log) reconciles each
// task once and then defers the counts of tasks without a limit; see the
// package documentation.
type DeferringCounter interface {
	Counter
	Defer(session, task string) (stream.Usage, bool)
	Reconcile(ctx context.Context, session, task string, recorded, limit int64) (stream.Usage, error)
}

// Gateway is how agents and hosts call tools. *Runtime implements it.
type Gateway interface {
	// Call runs a new logical action of tool with args in the default task.
	Call(ctx context.Context, tool string, args json.RawMessage) (Result, error)
	// CallWithOptions runs tool with args; opts.Retry makes it a retry
	// under a plan.
	CallWithOptions(ctx context.Context, tool string, args json.RawMessage, opts CallOptions) (Result, error)
}

// CallOptions are the per-call knobs of CallWithOptions. The zero value is a
// new logical action in Config.DefaultTask.
type CallOptions struct {
	// Task is the call's task. Empty means the plan's task for a retry and
	// Config.DefaultTask otherwise. Tasks are 1–128 bytes of [A-Za-z0-9_-]
	// (they are part of the jw_budget key).
	Task string
	// Retry, when set, makes the call a retry under this plan: the plan is
	// verified and consumed (see TakeOperation) and its key reused. A Task
	// that differs from the plan's is refused (plan_mismatch).
	Retry *schema.Plan
	// RequestID is the agent's id for the intent, recorded on tool.call.
	RequestID string
	// ProviderCallID is the model provider's id, recorded on tool.call;
	// never used as a key.
	ProviderCallID string
}

// Result is what became of a call. A call that reached the log has a CallID
// and a Status; Status is "" only when nothing, or only tool.call, was
// recorded (see the returned error).
type Result struct {
	// CallID is the attempt's id.
	CallID string
	// Operation is the recorded operation (key, contract, retry link).
	Operation schema.Operation
	// CallSeq is the stream sequence of the tool.call event: the prior_seq
	// a later plan for this call will carry.
	CallSeq uint64
	// Status is the tool.result status.
	Status schema.Status
	// Stage is the refusing admission stage, with StatusRejected.
	Stage schema.Stage
	// Retryable repeats the result's retryable flag.
	Retryable bool
	// Output is the body's output, with StatusOK.
	Output json.RawMessage
	// Error is the recorded error text, for every status but ok.
	Error string
}

// Config configures a Runtime. Session, Log, Registry, Plans and Budget are
// required; every other field has a default.
type Config struct {
	// Session is the session whose log the runtime writes. Required, 1–128
	// bytes of [A-Za-z0-9_-].
	Session string
	// Log is the session log, opened by this writer at its epoch (normally a
	// *stream.Log from Logs.OpenLog). Required.
	Log Appender
	// Registry holds the callable tools. Required.
	Registry *Registry
	// Plans is the jw_plans store retries are taken from (normally
	// stream.NewPlans(topology.Plans)). Required.
	Plans PlanStore
	// Budget counts tool_calls per session and task (normally
	// stream.NewBudget(topology.Budget)). Required. A DeferringCounter
	// lets the runtime take counts off the call path (see History).
	Budget Counter
	// History is the confirmed history the Log was opened on (normally the
	// one the new owner loaded after fencing the session). Before it counts
	// the first call of a task, the runtime raises the task's jw_budget
	// count to at least the tool.call events of that task in History, so
	// an attempt recorded by a writer that crashed before its count was
	// written is still counted. Nil means unknown, unless Log is a
	// *stream.Log that was empty when New ran (nothing recorded). A
	// runtime that knows its history and has a DeferringCounter defers the
	// counts of tasks without a limit, and records their calls that want
	// no approval in the combined form (two appends, see the package
	// documentation); otherwise every count is written before the budget
	// stage decides.
	History []schema.Event
	// BudgetLimit is the tool_calls limit given to a task's counter when its
	// first call is counted; a counter that exists keeps its own limit (see
	// stream.Budget.SetLimit). Defaults to 0: no limit.
	BudgetLimit int64
	// DefaultTask is the task of a call that names none. Defaults to
	// "default".
	DefaultTask string
	// TrustedPlanners are the public keys of the recovery workers whose
	// signed retry plans the runtime accepts (see TakeOperation). Nil or
	// empty trusts no one: every retry plan is refused with plan_untrusted.
	TrustedPlanners recovery.TrustedKeys
	// Permission, Guard and Approval are the admission hooks of those
	// stages. Nil admits every call.
	Permission, Guard, Approval Hook
	// TrustedApprovers are the public keys whose signed approvals and
	// denials answer the calls of tools with an ApprovalRule (Resume). Nil
	// or empty trusts no one: such calls wait until their deadline and end
	// rejected at stage approval.
	TrustedApprovers recovery.TrustedKeys
	// Approvals publishes the approval request of every call that starts
	// waiting (normally the *stream.Topology). Nil publishes nothing: the
	// approval.requested on the log is the only request.
	Approvals ApprovalAsker
	// StopExhaustedTasks makes a call refused at stage budget because its
	// task's tool_calls limit is exhausted also stop the task
	// (task.stopped by "budget"). Defaults to false.
	StopExhaustedTasks bool
	// DefaultTimeout bounds a body whose tool sets no Timeout. Defaults to
	// 30 s.
	DefaultTimeout time.Duration
	// DefaultOutputLimit is the output limit of a tool that sets none.
	// Defaults to 1 MiB.
	DefaultOutputLimit int
	// WriteTimeout bounds each append after tool.call: they run even when
	// the caller's context is cancelled, so the log stays complete.
	// Defaults to 10 s.
	WriteTimeout time.Duration
	// Logger receives the runtime's log. Defaults to a disabled logger (the
	// zero zerolog.Logger).
	Logger zerolog.Logger
	// Observer, when non-nil, is told of every append to the session log
	// (metrics). Nil tells no one.
	Observer Observer
	// Now is the clock stamped on events. Defaults to time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultTask          = "default"
	DefaultTimeout       = 30 * time.Second
	DefaultOutputLimit   = 1 << 20
	DefaultWriteTimeout  = 10 * time.Second
	defaultRandomIDBytes = 16
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.DefaultTask == "" {
		c.DefaultTask = DefaultTask
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.DefaultOutputLimit <= 0 {
		c.DefaultOutputLimit = DefaultOutputLimit
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case !schema.ValidSession(c.Session):
		return fmt.Errorf("%w: Session %q must be 1-128 bytes of [A-Za-z0-9_-]", ErrInvalidConfig, c.Session)
	case c.Log == nil:
		return fmt.Errorf("%w: Log is required", ErrInvalidConfig)
	case c.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrInvalidConfig)
	case c.Plans == nil:
		return fmt.Errorf("%w: Plans is required", ErrInvalidConfig)
	case c.Budget == nil:
		return fmt.Errorf("%w: Budget is required", ErrInvalidConfig)
	case c.BudgetLimit < 0:
		return fmt.Errorf("%w: BudgetLimit must not be negative", ErrInvalidConfig)
	case !schema.ValidSession(c.DefaultTask):
		return fmt.Errorf("%w: DefaultTask %q must be 1-128 bytes of [A-Za-z0-9_-]", ErrInvalidConfig, c.DefaultTask)
	}
	return nil
}

// Runtime is the canonical runtime of one writer for one session log
// (docs/protocol.md §8). It is safe for concurrent use: calls run in parallel, and
// their events are ordered by the log. Once the log reports the session
// fenced, every later call fails with ErrFenced without touching the log.
type Runtime struct {
	cfg    Config
	fenced atomic.Bool

	// dc is cfg.Budget as a DeferringCounter when it is one and the
	// runtime knows its history (recorded != nil).
	dc         DeferringCounter
	recorded   map[string]int64 // tool.call events per task when the log was opened
	bmu        sync.Mutex
	reconciled map[string]bool // tasks whose count covers recorded

	// retried maps every prior call that already has a retry on the log to
	// that retry's call id (nil when the history is unknown): a plan for
	// such a call is refused whatever jw_plans says, so a consumed record
	// reset to issued cannot run an action twice.
	rmu     sync.Mutex
	retried map[string]string

	// pending holds the calls waiting for approval and stopped the
	// stopped tasks (approval.go), under amu; smu orders the recording of
	// a call (read-locked from the stopped check to its tool.call) against
	// a task.stopped (locked).
	amu     sync.Mutex
	pending map[string]*parked
	stopped map[string]schema.Stop
	smu     sync.RWMutex
}

var _ Gateway = (*Runtime)(nil)

// New returns a runtime for cfg (after WithDefaults). It fails with
// ErrInvalidConfig naming a missing or invalid field.
func New(cfg Config) (*Runtime, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// No logger with the session in its context is kept (500 bytes a
	// runtime, and a tool worker holds thousands): log lines add it.
	r := &Runtime{cfg: cfg}
	known := recordedCalls(cfg)
	if dc, ok := cfg.Budget.(DeferringCounter); ok && known != nil {
		r.recorded, r.dc, r.reconciled = known, dc, make(map[string]bool)
	}
	if known != nil {
		r.retried = make(map[string]string)
		for i := range cfg.History {
			if c := cfg.History[i].Call; c != nil && c.Operation != nil && c.Operation.Retry != nil {
				r.retried[c.Operation.Retry.PriorCallID] = c.CallID
			}
		}
	}
	r.loadApprovals()
	r.cfg.History = nil // read here only: not kept with the runtime
	return r, nil
}

// epoch returns the epoch of the runtime's log, or 0 if it cannot tell.
func (r *Runtime) epoch() uint64 {
	if l, ok := r.cfg.Log.(interface{ Epoch() uint64 }); ok {
		return l.Epoch()
	}
	return 0
}

// priorReader returns the Log's EventAt (a *stream.Log's), for
// TakeOperation to check a plan against its prior call; nil if the Log
// cannot read its events.
func (r *Runtime) priorReader() func(context.Context, uint64) (schema.Event, bool, error) {
	if er, ok := r.cfg.Log.(interface {
		EventAt(context.Context, uint64) (schema.Event, bool, error)
	}); ok {
		return er.EventAt
	}
	return nil
}

// callEnvelope bounds what a tool.call takes besides its arguments: the
// event's envelope, its ids and operation (each field at most 1,024
// bytes) and a retry's link with its review.
const callEnvelope = 16 << 10

// resultEnvelope bounds what a tool.result takes besides its output: the
// event's envelope and ids, and its error text (at most
// schema.MaxResultErrorBytes, each byte escaped at worst as \u00XX).
const resultEnvelope = 2<<10 + 6*schema.MaxResultErrorBytes

// outputLimit returns the output limit of a call of t.
func (r *Runtime) outputLimit(t *registered) int {
	if t.OutputLimit > 0 {
		return t.OutputLimit
	}
	return r.cfg.DefaultOutputLimit
}

// resultRoom returns the most bytes the tool.result of a call of t can
// take: what its tool.call keeps on the log for it (stream.WithCallRoom),
// so that a call whose body ran always has room for its result.
func (r *Runtime) resultRoom(t *registered) int64 {
	return int64(r.outputLimit(t)) + resultEnvelope
}

// RetryRoom returns the most room (events, bytes) a Runtime asks of a
// session log before it spends a retry plan for a call with args, whatever
// the tool's output limit, on a server whose max_payload is maxPayload:
// the call itself and what the log keeps for its start and result (never
// more than the largest event, stream.LargestEvent). The recovery worker
// refuses a plan for a session with less room (history_too_large), so a
// plan it issues is one a tool worker can record.
func RetryRoom(args json.RawMessage, maxPayload int) (events int, bytes int64) {
	return callRoomFor(args, stream.LargestEvent(maxPayload))
}

// callRoomFor is the room a call with args asks for when its result may
// take result bytes: RetryRoom's rule, and roomForCall's.
func callRoomFor(args json.RawMessage, result int64) (int, int64) {
	events, kept := stream.CallRoom(result)
	return events + 1, int64(len(args)) + callEnvelope + kept
}

// roomForCall refuses a call the session log has no room to record (its
// tool.call, and the room that call keeps for its start and result)
// before anything of it is spent: a retry's plan (a plan spent on an
// attempt that cannot reach the log would strand its call) or a count in
// jw_budget (counted for a call never recorded). A log that cannot tell
// (not a *stream.Log) is not checked. The call's size is bounded from
// above, so a call it lets through is one the log admits.
func (r *Runtime) roomForCall(t *registered, args json.RawMessage, retry bool) error {
	l, ok := r.cfg.Log.(interface{ Room() (int, int64) })
	if !ok {
		return nil
	}
	events, bytes := l.Room()
	result := r.resultRoom(t)
	if lp, ok := r.cfg.Log.(interface{ MaxPayload() int }); ok {
		// The log keeps at most its largest event for a result.
		result = min(result, stream.LargestEvent(lp.MaxPayload()))
	}
	needEvents, need := callRoomFor(args, result)
	if events < needEvents || bytes < need {
		what, left := "a call", "nothing was recorded or counted"
		if retry {
			what, left = "a retry", "the plan is left unused"
		}
		return &schema.Error{Code: schema.CodeHistoryTooLarge, Message: fmt.Sprintf("session %s has room for %d more events (%d bytes): %s needs %d events and about %d bytes (its call, and room for its start and result); %s", r.cfg.Session, events, bytes, what, needEvents, need, left)}
	}
	return nil
}

// retriedBy returns the call id of the retry of prior already on the log,
// if the runtime knows one.
func (r *Runtime) retriedBy(prior string) (string, bool) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	id, ok := r.retried[prior]
	return id, ok
}

// noteRetry records that callID, now on the log, retries prior.
func (r *Runtime) noteRetry(prior, callID string) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.retried != nil {
		r.retried[prior] = callID
	}
}

// recordedCalls returns the tool.call events per task in the history the
// log was opened on, or nil if that is unknown.
func recordedCalls(cfg Config) map[string]int64 {
	if cfg.History == nil {
		if l, ok := cfg.Log.(interface{ LastSeq() uint64 }); ok && l.LastSeq() == 0 {
			return map[string]int64{} // an empty log: nothing recorded
		}
		return nil
	}
	return stream.CallsPerTask(cfg.History)
}

// Flush writes the counts the runtime's counter deferred (if it has a
// Flush(ctx) error method, as *stream.Budget does). Calls need no Flush:
// deferred counts are written within the counter's flush interval; Flush
// is for a host that stops or hands the session over.
func (r *Runtime) Flush(ctx context.Context) error {
	if f, ok := r.cfg.Budget.(interface{ Flush(context.Context) error }); ok {
		return f.Flush(ctx)
	}
	return nil
}

// Session returns the session the runtime writes.
func (r *Runtime) Session() string { return r.cfg.Session }

// Call runs a new logical action of tool with args in the default task; see
// CallWithOptions.
func (r *Runtime) Call(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	return r.CallWithOptions(ctx, tool, args, CallOptions{})
}

// CallWithOptions runs one attempt of tool with args through the canonical
// steps (see the package documentation) and returns what became of it. The
// error is nil exactly when the result is ok; otherwise it is a *schema.Error whose
// Code is the status ("failed", "timeout", …), "rejected" (with Stage), a
// plan refusal (nothing recorded, matches schema.ErrPlanRefused), or a reason
// nothing was recorded (unknown_tool, invalid_call, fenced, log_unavailable).
// Nil args mean {}.
func (r *Runtime) CallWithOptions(ctx context.Context, tool string, args json.RawMessage, opts CallOptions) (Result, error) {
	if r.fenced.Load() {
		return Result{}, &schema.Error{Code: schema.CodeFenced, Message: "session " + r.cfg.Session + " was taken over", Err: stream.ErrFenced}
	}
	t := r.cfg.Registry.lookup(tool)
	if t == nil {
		return Result{}, &schema.Error{Code: schema.CodeUnknownTool, Message: fmt.Sprintf("no tool %q", tool)}
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	task := opts.Task
	switch {
	case task == "" && opts.Retry != nil:
		task = opts.Retry.Task // verified against the issued plan below
	case task == "":
		task = r.cfg.DefaultTask
	}
	switch {
	case !json.Valid(args):
		return Result{}, &schema.Error{Code: schema.CodeInvalidCall, Message: "arguments are not valid JSON"}
	case !schema.ValidSession(task):
		return Result{}, &schema.Error{Code: schema.CodeInvalidCall, Message: fmt.Sprintf("task %q must be 1-128 bytes of [A-Za-z0-9_-]", task)}
	case len(opts.RequestID) > schema.MaxFieldBytes || len(opts.ProviderCallID) > schema.MaxFieldBytes:
		return Result{}, &schema.Error{Code: schema.CodeInvalidCall, Message: fmt.Sprintf("request_id or provider_call_id over %d bytes", schema.MaxFieldBytes)}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	// A stopped task records nothing more (a plan for it is not consumed
	// either); the read lock keeps a task.stopped from coming between this
	// check and the tool.call.
	// unlockStop runs on this goroutine only (at the tool.call, or on
	// return): a flag, not a sync.Once.
	r.smu.RLock()
	stopLocked := true
	unlockStop := func() {
		if stopLocked {
			stopLocked = false
			r.smu.RUnlock()
		}
	}
	defer unlockStop()
	if err := r.refuseStopped(task); err != nil {
		return Result{}, err
	}

	// Steps 1-2: a fresh call id; the plan's key for a retry, else a new one.
	var callID string
	var op schema.Operation
	if opts.Retry != nil {
		callID = randomID("c-")
		if err := r.roomForCall(t, args, true); err != nil {
			return Result{}, err
		}
		if id, ok := r.retriedBy(opts.Retry.PriorCallID); ok {
			err := &schema.Error{Code: schema.CodePlanConsumed, Message: fmt.Sprintf("plan %s: the log already holds attempt %s of call %s", opts.Retry.PlanID, id, opts.Retry.PriorCallID), Err: stream.ErrPlanConsumed}
			r.cfg.Logger.Warn().Str("session", r.cfg.Session).Err(err).Str("tool", tool).Str("plan_id", opts.Retry.PlanID).Msg("retry plan refused: its call was retried already (jw_plans says otherwise?)")
			return Result{}, err
		}
		// Only a runtime that knows the confirmed history (retried != nil)
		// and holds a higher epoch than a consumer may complete its plan.
		r.rmu.Lock()
		known := r.retried != nil
		r.rmu.Unlock()
		taken, err := TakeOperation(ctx, r.cfg.Plans, Attempt{
			Session: r.cfg.Session, Task: task, Tool: tool, Arguments: args,
			Contract: t.Metadata.Contract, CallID: callID, Planners: r.cfg.TrustedPlanners,
			Epoch: r.epoch(), MayComplete: known, Prior: r.priorReader(),
		}, *opts.Retry)
		if err != nil {
			r.cfg.Logger.Info().Str("session", r.cfg.Session).Err(err).Str("tool", tool).Str("plan_id", opts.Retry.PlanID).Msg("retry plan refused")
			return Result{}, err
		}
		op, callID = taken.Operation, taken.CallID
		if taken.Completed {
			r.cfg.Logger.Info().Str("session", r.cfg.Session).Str("call_id", callID).Str("plan_id", opts.Retry.PlanID).Msg("plan consumed by a fenced writer whose attempt never reached the log: completing that attempt")
		}
	} else {
		var key string
		callID, key = randomIDs("c-", "op-")
		op = schema.Operation{Task: task, Key: key, Contract: t.Metadata.Contract}
	}
	res := Result{CallID: callID, Operation: op}
	// The call's logger is built only when something is logged.
	lg := func() *zerolog.Logger {
		lc := r.cfg.Logger.With().Str("session", r.cfg.Session).Str("call_id", callID).Str("tool", tool).Str("task", task).Str("op_key", op.Key)
		if op.Retry != nil {
			// A plan consumed by an attempt whose tool.call is then not
			// recorded leaves its prior call without a usable successor
			// plan: say which.
			lc = lc.Str("plan_id", op.Retry.PlanID)
		}
		l := lc.Logger()
		return &l
	}

	adm := Admission{
		Session: r.cfg.Session, CallID: callID, Tool: tool, Arguments: args,
		RequestID: opts.RequestID, ProviderCallID: opts.ProviderCallID, Operation: op,
	}
	// The tool.call keeps room on the log for the call's start and result
	// (stream.WithCallRoom): a call the log has no room to finish is
	// refused (history_too_large) before anything is written.
	callCtx := stream.WithCallRoom(ctx, r.resultRoom(t))
	callEv := func(started bool) schema.Event {
		return schema.Event{Type: schema.TypeCall, Call: &schema.Call{
			CallID: callID, Tool: tool, Arguments: args,
			RequestID: opts.RequestID, ProviderCallID: opts.ProviderCallID,
			StartMarker: !started, Started: started, Operation: &op,
		}}
	}
	// recorded is what follows a tool.call on the log: the stop lock is
	// released and a retry noted.
	recorded := func(seq uint64) {
		res.CallSeq = seq
		unlockStop()
		if op.Retry != nil {
			r.noteRetry(op.Retry.PriorCallID, callID)
		}
	}

	// The combined form (docs/protocol.md §8): when no admission stage
	// has to wait — the call wants no approval, and its task's count is
	// deferred, so the budget stage decides from memory — admission runs
	// before anything is written, and an admitted call is recorded with
	// its start in one tool.call{started: true}: two appends per call.
	// The stop lock is held throughout, so no task.stopped comes between
	// the stop check and the tool.call.
	wants := approvalWait(t, args)
	if !wants {
		if u, ok := r.deferred(task); ok {
			stage, why, _ := r.admit(ctx, t, adm, false, func() (stream.Usage, error) { return u, nil })
			if stage == "" {
				// Steps 3 and 5 in one event: the body runs only once it is
				// acknowledged.
				seq, err := r.append(callCtx, callEv(true))
				if err != nil {
					lg().Error().Err(err).Msg("tool.call not recorded; body not run")
					return Result{}, err
				}
				recorded(seq)
				return r.runAndFinish(ctx, t, args, res)
			}
			// A refused call still leaves its call (with a start marker:
			// it never started) and its rejection.
			seq, err := r.append(callCtx, callEv(false))
			if err != nil {
				lg().Error().Err(err).Msg("tool.call not recorded")
				return Result{}, err
			}
			recorded(seq)
			return r.refuse(ctx, res, stage, why, lg)
		}
	}

	// The three-event form. Step 3: record the attempt and count it. The
	// count is taken before or alongside the append (it is never
	// refunded, so counting an attempt whose append then fails only errs
	// on the safe side). From here on every write runs even if the caller
	// goes away, each bounded by WriteTimeout. A call the log has no room
	// for is refused before it is counted (a retry was checked before
	// its plan was spent).
	if opts.Retry == nil {
		if err := r.roomForCall(t, args, false); err != nil {
			return Result{}, err
		}
	}
	budgetStage := r.count(ctx, task)
	// The call returns only once its count is written (or failed), on
	// every path: a refusal before the budget stage and a tool.call that
	// did not reach the log too, so a caller that returns, or a process
	// that exits after it, leaves no count in flight.
	defer budgetStage()
	seq, err := r.append(callCtx, callEv(false))
	if err != nil {
		lg().Error().Err(err).Msg("tool.call not recorded")
		return Result{}, err
	}
	recorded(seq)

	// Step 4: admission.
	stage, why, infraErr := r.admit(ctx, t, adm, wants, budgetStage)
	if infraErr != nil {
		// jw_budget stayed unavailable for the whole WriteTimeout: not a
		// refusal of the call. Nothing more is written (the body has not
		// started, tool.started is not on the log), so the call stays open
		// with its start marker: the session's next owner fences it and it
		// is assessed not_started, retry_allowed.
		lg().Error().Err(infraErr).Msg("budget unavailable; call left open (not started), not rejected")
		return res, &schema.Error{Code: schema.CodeLog, CallID: callID, Message: "budget unavailable, call not started: " + infraErr.Error(), Err: infraErr}
	}
	if stage == stageAwaiting {
		return r.park(ctx, t, adm, budgetStage, res)
	}
	if stage != "" {
		return r.refuse(ctx, res, stage, why, lg)
	}
	return r.startAndRun(ctx, t, args, res)
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
	callID, op, tool := res.CallID, res.Operation, t.Metadata.Name
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = r.cfg.DefaultTimeout
	}
	limit := r.outputLimit(t)
	fence := Fence{Session: r.cfg.Session, Epoch: r.epoch(), CallID: callID, Task: op.Task, Key: op.Key}
	r.run(WithFence(ctx, fence), t, BodyRequest{
		Session: r.cfg.Session, CallID: callID, Tool: tool, Arguments: args,
		Operation: Operation{Task: op.Task, Key: op.Key, Contract: op.Contract},
		Fence:     fence,
	}, timeout, limit, &res)

	// Step 6: tool.result.
	var callErr error
	if res.Status != schema.StatusOK {
		callErr = &schema.Error{Code: schema.Code(res.Status), CallID: callID, Message: res.Error}
		r.callLog(t, res).Info().Str("status", string(res.Status)).Str("error", res.Error).Msg("call did not complete")
	}
	return r.finish(ctx, res, callErr)
}

// count counts one call of task and returns how the budget stage gets the
// usage. A task whose count can be deferred (see Config.History) is
// counted in memory at once; otherwise the count is written alongside the
// tool.call append, after reconciling the task with the history once if
// the runtime knows it.
func (r *Runtime) count(ctx context.Context, task string) func() (stream.Usage, error) {
	if u, ok := r.deferred(task); ok {
		return func() (stream.Usage, error) { return u, nil }
	}
	type counted struct {
		u   stream.Usage
		err error
	}
	countc := make(chan counted, 1)
	go func() {
		cctx, cancel := r.writeContext(ctx)
		defer cancel()
		u, err := r.countNow(cctx, task)
		countc <- counted{u, err}
	}()
	var once sync.Once
	var c counted
	return func() (stream.Usage, error) {
		once.Do(func() { c = <-countc })
		return c.u, c.err
	}
}

// deferred counts one call of task in memory and returns the usage after
// it, if the task's count can be deferred (see Config.History): the
// budget stage then needs no wait. False counts nothing.
func (r *Runtime) deferred(task string) (stream.Usage, bool) {
	if r.dc != nil && r.isReconciled(task) {
		return r.dc.Defer(r.cfg.Session, task)
	}
	return stream.Usage{}, false
}

// countNow writes one count of task, reconciling the task first if it
// was not yet. A transient failure of jw_budget (a 503 while a stream
// leader is elected, a request timeout, a reconnect) is retried with
// backoff until ctx ends (the call's WriteTimeout): the budget stage never
// refuses a call because its store was briefly unavailable. The attempt is
// counted once however often the write is retried: a failed count stays
// pending in the counter, and a retry only flushes it (a Counter with a
// Get that flushes, as *stream.Budget has; another Counter is asked to
// Add again, which may count the attempt twice: high, never low).
func (r *Runtime) countNow(ctx context.Context, task string) (stream.Usage, error) {
	wait := 20 * time.Millisecond
	counted := false
	for {
		u, err := r.countOnce(ctx, task, &counted)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return u, err
		}
		r.sessionLog().Warn().Err(err).Str("task", task).Dur("retry_in", wait).Msg("jw_budget unavailable; counting again")
		select {
		case <-ctx.Done():
			return u, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// countOnce is one try of countNow; counted says the attempt's count was
// already handed to the counter (it is pending there if its write failed).
func (r *Runtime) countOnce(ctx context.Context, task string, counted *bool) (stream.Usage, error) {
	if r.dc != nil && !r.isReconciled(task) {
		r.bmu.Lock()
		recorded := r.recorded[task]
		r.bmu.Unlock()
		if _, err := r.dc.Reconcile(ctx, r.cfg.Session, task, recorded, r.cfg.BudgetLimit); err != nil {
			// Still count this attempt (a failed write stays pending in the
			// counter), but refuse: the count may not cover the history.
			if !*counted {
				_, _ = r.cfg.Budget.Add(ctx, r.cfg.Session, task, r.cfg.BudgetLimit)
				*counted = true
			}
			return stream.Usage{}, err
		}
		r.bmu.Lock()
		r.reconciled[task] = true
		r.bmu.Unlock()
	}
	if g, ok := r.cfg.Budget.(interface {
		Get(ctx context.Context, session, task string) (stream.Usage, error)
	}); ok && *counted {
		return g.Get(ctx, r.cfg.Session, task)
	}
	*counted = true
	return r.cfg.Budget.Add(ctx, r.cfg.Session, task, r.cfg.BudgetLimit)
}

func (r *Runtime) isReconciled(task string) bool {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	return r.reconciled[task]
}

// admit runs the admission stages in order and returns the refusing stage
// and why, or "" when the call is admitted; wants is wantsApproval of the
// call (decided once per call), which parks it at the approval stage
// (stageAwaiting).
//
// A count that failed for a transient reason (Transient) even after
// countNow's retries is returned as the error: it refuses nothing.
func (r *Runtime) admit(ctx context.Context, t *registered, a Admission, wants bool, usage func() (stream.Usage, error)) (schema.Stage, string, error) {
	hook := func(stage schema.Stage, h Hook) (schema.Stage, string) {
		if err := ctx.Err(); err != nil {
			return stage, "caller gone before " + string(stage) + ": " + err.Error()
		}
		if h == nil {
			return "", ""
		}
		if err := h.Admit(ctx, a); err != nil {
			return stage, err.Error()
		}
		return "", ""
	}
	if s, why := hook(schema.StagePermission, r.cfg.Permission); s != "" {
		return s, why, nil
	}
	if err := t.validate(a.Arguments); err != nil {
		return schema.StageArguments, "arguments do not match the input schema of " + t.Metadata.Name + ": " + err.Error(), nil
	}
	if s, why := hook(schema.StageGuard, r.cfg.Guard); s != "" {
		return s, why, nil
	}
	if s, why := hook(schema.StageApproval, r.cfg.Approval); s != "" {
		return s, why, nil
	}
	if wants {
		return stageAwaiting, "", nil // the budget stage runs once it is approved
	}
	u, countErr := usage() // the count was taken before or alongside the tool.call append (deferred: in memory)
	switch {
	case countErr != nil && Transient(countErr):
		return "", "", countErr
	case countErr != nil:
		return schema.StageBudget, "budget unavailable: " + countErr.Error(), nil
	case u.Over():
		return schema.StageBudget, fmt.Sprintf("tool_calls %d over the limit %d for task %s", u.ToolCalls, u.Limit, a.Operation.Task), nil
	case ctx.Err() != nil:
		return schema.StageBudget, "caller gone before the body started: " + ctx.Err().Error(), nil
	}
	return "", "", nil
}

// run executes the body and fills res.Status, Output, Error and Retryable.
func (r *Runtime) run(ctx context.Context, t *registered, req BodyRequest, timeout time.Duration, limit int, res *Result) {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type out struct {
		b   json.RawMessage
		err error
	}
	done := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- out{err: fmt.Errorf("body panicked: %v", p)}
			}
		}()
		b, err := t.Body(bctx, req)
		done <- out{b, err}
	}()
	var o out
	select {
	case o = <-done:
	case <-bctx.Done():
		select {
		case o = <-done: // finished at the same moment: its answer stands
		default:
			o.err = bctx.Err()
		}
	}
	switch {
	case o.err == nil && len(o.b) > limit:
		res.Status, res.Error = schema.StatusOutputLimit, fmt.Sprintf("output of %d bytes is over the limit of %d bytes", len(o.b), limit)
	case o.err == nil && len(o.b) > 0 && !json.Valid(o.b):
		res.Status, res.Error = schema.StatusFailed, "body returned output that is not valid JSON"
	case o.err == nil:
		res.Status, res.Output = schema.StatusOK, o.b
	case bctx.Err() != nil && (errors.Is(o.err, context.DeadlineExceeded) || errors.Is(o.err, context.Canceled) || errors.Is(o.err, bctx.Err())):
		if ctx.Err() != nil {
			res.Status = schema.StatusCancelled
		} else {
			res.Status = schema.StatusTimeout
		}
		res.Error, res.Retryable = o.err.Error(), true
	default:
		res.Status, res.Error = schema.StatusFailed, o.err.Error()
		var be *bodyError
		if errors.As(o.err, &be) {
			res.Status, res.Retryable = be.status, be.retryable
		}
	}
}

// finish appends the tool.result of res (whatever became of ctx) and returns
// res with callErr, or the append's error.
//
// The error text is cut to schema.MaxResultErrorBytes. An output the log
// refuses for good (over the server's max_payload or the room its call
// kept, or beyond what a history reader accepts) is not recorded: the
// result is recorded without it, as output_limit, so a call whose body
// ran is never left open for want of room for its output.
func (r *Runtime) finish(ctx context.Context, res Result, callErr error) (Result, error) {
	res.Error = cutText(res.Error, schema.MaxResultErrorBytes)
	err := r.appendResult(ctx, res)
	if err != nil && len(res.Output) > 0 && outputRefused(err) {
		r.cfg.Logger.Warn().Str("session", r.cfg.Session).Err(err).Str("call_id", res.CallID).Int("output_bytes", len(res.Output)).Msg("output not recordable; result recorded without it (output_limit)")
		why := cutText(fmt.Sprintf("output of %d bytes could not be recorded: %v", len(res.Output), err), schema.MaxResultErrorBytes)
		res.Status, res.Output, res.Error, res.Retryable = schema.StatusOutputLimit, nil, why, false
		callErr = &schema.Error{Code: schema.Code(res.Status), CallID: res.CallID, Message: why}
		err = r.appendResult(ctx, res)
	}
	if err != nil {
		r.cfg.Logger.Error().Str("session", r.cfg.Session).Err(err).Str("call_id", res.CallID).Str("status", string(res.Status)).Msg("tool.result not recorded")
		return res, err
	}
	return res, callErr
}

// appendResult appends the tool.result of res.
func (r *Runtime) appendResult(ctx context.Context, res Result) error {
	_, err := r.append(ctx, schema.Event{Type: schema.TypeResult, Result: &schema.Result{
		CallID: res.CallID, Status: res.Status, Stage: res.Stage, Retryable: res.Retryable,
		Output: res.Output, Error: res.Error,
	}})
	return err
}

// outputRefused reports an append refused for good because of what the
// event holds (its size, or a value no history reader accepts), which
// the same event without its output would not be.
func outputRefused(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, schema.ErrHistoryTooLarge) ||
		errors.Is(err, schema.ErrCorruptHistory) || errors.Is(err, schema.ErrFieldTooLong)
}

// cutText returns s cut to at most n bytes, at a UTF-8 boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// writeContext returns a context for one write: it keeps ctx's values but
// not its cancellation, and ends after WriteTimeout.
func (r *Runtime) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
}

// append stamps and appends one event under its own write context (see
// writeContext); a fenced log fences the runtime. A *stream.Log is given
// the bound instead (AppendFor: the same bound without a context made
// per append). Only the Log itself: an Appender that wraps one (embeds
// it, overriding Append) has its own Append called.
func (r *Runtime) append(ctx context.Context, ev schema.Event) (uint64, error) {
	ev.V, ev.Session, ev.At = schema.Version, r.cfg.Session, r.cfg.Now().UTC()
	var start time.Time
	if r.cfg.Observer != nil {
		start = time.Now()
	}
	var seq uint64
	var err error
	if l, ok := r.cfg.Log.(*stream.Log); ok {
		seq, err = l.AppendFor(ctx, ev, r.cfg.WriteTimeout)
	} else {
		wctx, cancel := r.writeContext(ctx)
		seq, err = r.cfg.Log.Append(wctx, ev)
		cancel()
	}
	if o := r.cfg.Observer; o != nil {
		o.Appended(ev, time.Since(start), err)
	}
	if err == nil {
		return seq, nil
	}
	if errors.Is(err, stream.ErrFenced) {
		r.fenced.Store(true)
		return 0, &schema.Error{Code: schema.CodeFenced, CallID: ev.CallID(), Message: "session " + r.cfg.Session + " was taken over", Err: err}
	}
	return 0, &schema.Error{Code: schema.CodeLog, CallID: ev.CallID(), Message: "append " + ev.Type + ": " + err.Error(), Err: err}
}

// randomID returns prefix and 32 hex digits from crypto/rand.
func randomID(prefix string) string {
	var b [defaultRandomIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hexID(prefix, b[:])
}

// randomIDs is two randomIDs (a call id and an operation key) from one
// read of crypto/rand.
func randomIDs(prefix1, prefix2 string) (string, string) {
	var b [2 * defaultRandomIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hexID(prefix1, b[:defaultRandomIDBytes]), hexID(prefix2, b[defaultRandomIDBytes:])
}

// hexID returns prefix and b in lower-case hex, in one allocation.
func hexID(prefix string, b []byte) string {
	const hex = "0123456789abcdef"
	var out strings.Builder
	out.Grow(len(prefix) + 2*len(b))
	out.WriteString(prefix)
	for _, c := range b {
		out.WriteByte(hex[c>>4])
		out.WriteByte(hex[c&15])
	}
	return out.String()
}

// sessionLog returns the runtime's logger with the session: built when a
// line is logged, not kept with every runtime (a worker holds many).
func (r *Runtime) sessionLog() *zerolog.Logger {
	l := r.cfg.Logger.With().Str("session", r.cfg.Session).Logger()
	return &l
}
