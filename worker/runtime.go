package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	// Tool is the call's tool.
	Tool string
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
	// ResultRetryFor is how long a tool.result whose append failed for a
	// reason that may pass (a timeout, a lost connection, a stream
	// electing its leader) is tried again, each try bounded by
	// WriteTimeout, while the caller's context lives and the session is
	// not taken over. A result never recorded leaves its call open until
	// a fence closes it for assessment (uncertain, though it ran).
	// Defaults to 1 minute; negative: not tried again.
	ResultRetryFor time.Duration
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
	DefaultTask           = "default"
	DefaultTimeout        = 30 * time.Second
	DefaultOutputLimit    = 1 << 20
	DefaultWriteTimeout   = 10 * time.Second
	DefaultResultRetryFor = time.Minute
	defaultRandomIDBytes  = 16
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
	if c.ResultRetryFor == 0 {
		c.ResultRetryFor = DefaultResultRetryFor
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

// sessionLog returns the runtime's logger with the session: built when a
// line is logged, not kept with every runtime (a worker holds many).
func (r *Runtime) sessionLog() *zerolog.Logger {
	l := r.cfg.Logger.With().Str("session", r.cfg.Session).Logger()
	return &l
}
