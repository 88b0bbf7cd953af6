package schema

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jingwei/jingwei/effect"
)

// Version is the schema version stamped in every message ("v": 1).
const Version = 1

// Event types on a session log. Unknown types are carried through and
// ignored by recovery.
const (
	TypeCall    = "tool.call"
	TypeStarted = "tool.started"
	TypeResult  = "tool.result"
	TypeFenced  = "session.fenced"
)

// Event is one message on a session log (jw.events.<session>). Exactly one of
// Call, Started, Result and Fence is set, matching Type; an event of an
// unknown type has none of them and is ignored by recovery.
type Event struct {
	V int `json:"v"`
	// Seq is the JetStream stream sequence: filled in when a history is
	// loaded or exported, ignored on publish (zero then).
	Seq     uint64    `json:"seq,omitempty"`
	Session string    `json:"session"`
	Epoch   uint64    `json:"epoch"`
	At      time.Time `json:"at"`
	Type    string    `json:"type"`

	Call    *Call    `json:"call,omitempty"`
	Started *Started `json:"started,omitempty"`
	Result  *Result  `json:"result,omitempty"`
	Fence   *Fence   `json:"fence,omitempty"`

	// ApprovalRequest, Approval and Stop are the bodies of
	// approval.requested, approval.granted and task.stopped (approval.go).
	ApprovalRequest *ApprovalRequest `json:"approval_request,omitempty"`
	Approval        *Approval        `json:"approval,omitempty"`
	Stop            *Stop            `json:"stop,omitempty"`
}

// Call is the body of a tool.call event: one attempt to run one tool.
type Call struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// RequestID is the agent's own id for the intent, when the call came
	// from a tool request; a request id already in the log is never run
	// again.
	RequestID string `json:"request_id,omitempty"`
	// ProviderCallID is the model provider's id (e.g. "toolu_1"); never
	// used as an operation key.
	ProviderCallID string `json:"provider_call_id,omitempty"`
	// StartMarker says the runtime follows the start-marker protocol: the
	// body only starts after a tool.started event is acknowledged.
	StartMarker bool `json:"start_marker"`
	// Started says the call was admitted when it was recorded and its body
	// may start as soon as this event is acknowledged: the event is a
	// tool.call and its tool.started in one (the combined form,
	// docs/protocol.md §5). A call with Started carries no StartMarker
	// (both set is corrupt_history) and never gets a tool.started or an
	// approval. False (omitted on the wire) is the three-event form.
	Started bool `json:"started,omitempty"`
	// Operation is nil only in the legacy format.
	Operation *Operation `json:"operation,omitempty"`
}

// Operation is the logical action a call performs. Key is stable across
// retries of one logical action.
type Operation struct {
	Task     string          `json:"task"`
	Key      string          `json:"key"`
	Contract effect.Contract `json:"contract"`
	// Retry links a retry to the attempt it follows; nil for a first attempt.
	Retry *RetryLink `json:"retry,omitempty"`
}

// Basis says why a retry plan was allowed.
type Basis string

// Plan bases (docs/protocol.md §9).
const (
	BasisNotStarted          Basis = "not_started"
	BasisUncertainSafe       Basis = "uncertain_safe"
	BasisReviewedNotExecuted Basis = "reviewed_not_executed"
)

// RetryLink is operation.retry: the prior attempt a retry follows and the
// plan that allowed it.
type RetryLink struct {
	PriorCallID string `json:"prior_call_id"`
	PriorSeq    uint64 `json:"prior_seq"`
	PlanID      string `json:"plan_id"`
	Basis       Basis  `json:"basis"`
	// Review is the review a reviewed_not_executed plan rested on; nil
	// (and omitted on the wire) otherwise.
	Review *Review `json:"review,omitempty"`
	// IssuedAt, Signer and Sig are the plan's issued_at, signer and sig:
	// with the call itself they rebuild the signed plan, so a reader with
	// the planner keys can check offline that the retry was authorized
	// (recovery.PlanOf). Zero (omitted) for retries recorded without a
	// signed plan.
	IssuedAt time.Time `json:"issued_at,omitzero"`
	Signer   string    `json:"signer,omitempty"`
	Sig      string    `json:"sig,omitempty"`
}

// Started is the body of a tool.started event.
type Started struct {
	CallID string `json:"call_id"`
}

// Status is a tool.result status.
type Status string

// Result statuses (docs/protocol.md §5).
const (
	StatusOK              Status = "ok"
	StatusRejected        Status = "rejected"
	StatusFailed          Status = "failed"
	StatusTimeout         Status = "timeout"
	StatusCancelled       Status = "cancelled"
	StatusBudgetExhausted Status = "budget_exhausted"
	StatusOutputLimit     Status = "output_limit"
)

// statuses is the result status table: the one list of statuses that
// Valid, Statuses, the event decoder and recovery derive from. Adding a
// status is a constant above, a row here, the value in event.schema.json's
// status enum (TestEnumsMatchSchemaFiles) and its tests.
var statuses = []Status{StatusOK, StatusRejected, StatusFailed, StatusTimeout, StatusCancelled, StatusBudgetExhausted, StatusOutputLimit}

// Valid reports whether s is one of the declared statuses.
func (s Status) Valid() bool { return slices.Contains(statuses, s) }

// Statuses returns the declared result statuses in the order of
// docs/protocol.md §5, as a new slice.
func Statuses() []Status { return slices.Clone(statuses) }

// Stage is the admission stage that refused a call (only with StatusRejected).
type Stage string

// Admission stages, in the order the runtime runs them (docs/protocol.md §8).
const (
	StagePermission Stage = "permission"
	StageArguments  Stage = "arguments"
	StageGuard      Stage = "guard"
	StageApproval   Stage = "approval"
	StageBudget     Stage = "budget"
)

// stages is the admission stage table, in the order the runtime runs
// them: the one list of stages that Valid, Stages, the event decoder and
// recovery derive from. Adding a stage is a constant above, a row here,
// the value in event.schema.json's stage enum and its tests.
var stages = []Stage{StagePermission, StageArguments, StageGuard, StageApproval, StageBudget}

// Valid reports whether s is one of the declared admission stages.
func (s Stage) Valid() bool { return slices.Contains(stages, s) }

// Stages returns the declared admission stages in the order the runtime
// runs them, as a new slice.
func Stages() []Stage { return slices.Clone(stages) }

// orList lists values for a message: "a, b, c or d".
func orList[T ~string](values []T) string {
	var b strings.Builder
	for i, v := range values {
		switch {
		case i == 0:
		case i == len(values)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(v))
	}
	return b.String()
}

// Result is the body of a tool.result event.
type Result struct {
	CallID    string `json:"call_id"`
	Status    Status `json:"status"`
	Retryable bool   `json:"retryable"`
	// Stage is set with StatusRejected only: the admission stage that
	// refused the call.
	Stage  Stage           `json:"stage,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Fence is the body of a session.fenced event: from this event on, only the
// writer of Epoch may append.
//
// Not to be confused with the fencing token a tool body receives
// (worker.Fence), the fenced business stores of package worker/fence, or
// raising a ledger's fence (fence.Store.Raise); docs/packages.md tells
// the four apart.
type Fence struct {
	Epoch uint64 `json:"epoch"`
	Owner string `json:"owner"`
}

// Verdict is a reviewer's statement about an uncertain call.
type Verdict string

// Review verdicts (docs/protocol.md §10).
const (
	VerdictNotExecuted Verdict = "not_executed"
	VerdictCompleted   Verdict = "completed"
	VerdictUncertain   Verdict = "uncertain"
)

// Valid reports whether v is one of the three verdicts.
func (v Verdict) Valid() bool {
	return v == VerdictNotExecuted || v == VerdictCompleted || v == VerdictUncertain
}

// Review is a trusted statement about an uncertain call (jw.reviews.<session>).
// Signer is an nkey user public key; Sig an ed25519 signature (base64url)
// over the RFC 8785 form of the review without Sig.
type Review struct {
	V        int     `json:"v"`
	Session  string  `json:"session"`
	CallID   string  `json:"call_id"`
	Operator string  `json:"operator"`
	Evidence string  `json:"evidence"`
	Verdict  Verdict `json:"verdict"`
	// Probe, when set, names the probe whose answer this review is: the
	// review is automated (a prober signed it with a prober key, not a
	// person with a reviewer key). It is part of the signed bytes, so a
	// review cannot be passed off as a person's or a probe's after signing.
	// Empty: a person's review.
	Probe  string `json:"probe,omitempty"`
	At     string `json:"at,omitempty"`
	Signer string `json:"signer,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// Automated reports whether the review is a probe's (Probe set) rather
// than a person's.
func (r *Review) Automated() bool { return r.Probe != "" }

// Source is "probe" for an automated review and "person" otherwise: where
// a review came from, as status, export and the console show it.
func (r *Review) Source() string {
	if r.Automated() {
		return "probe"
	}
	return "person"
}

// Plan is a single-use permission to attempt one exact call again
// (jw.plans.<session>). PlanID is derived from Session and PriorCallID.
type Plan struct {
	V           int             `json:"v"`
	PlanID      string          `json:"plan_id"`
	Session     string          `json:"session"`
	Task        string          `json:"task"`
	Tool        string          `json:"tool"`
	Arguments   json.RawMessage `json:"arguments"`
	ArgsDigest  string          `json:"args_digest"`
	Contract    effect.Contract `json:"contract"`
	Key         string          `json:"key"`
	PriorCallID string          `json:"prior_call_id"`
	PriorSeq    uint64          `json:"prior_seq"`
	Basis       Basis           `json:"basis"`
	Review      *Review         `json:"review"`
	IssuedAt    time.Time       `json:"issued_at"`
	// Signer is the nkey user public key of the recovery worker that
	// issued the plan, Sig its ed25519 signature (base64url, unpadded) over
	// the RFC 8785 form of the plan without sig (recovery.SignPlan). Tool
	// workers run only plans whose signature verifies against their
	// trusted planner keys.
	Signer string `json:"signer,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// Outcome classifies what happened to a call's latest attempt.
type Outcome string

// Outcomes (docs/protocol.md §9).
const (
	OutcomeCompleted  Outcome = "completed"
	OutcomeNotStarted Outcome = "not_started"
	OutcomeUncertain  Outcome = "uncertain"
)

// Decision is what recovery allows for a call.
type Decision string

// Decisions (docs/protocol.md §9).
const (
	DecisionRefuse       Decision = "refuse"
	DecisionRetryAllowed Decision = "retry_allowed"
	DecisionNeedsReview  Decision = "needs_review"
)

// Assessment is the classification of one call (jw.assessments.<session>, and
// the output of `jingwei inspect`). Evidence is the fact it rests on: a
// result status ("ok", "failed", …, "rejected:approval"), "no_result" or
// "not_started_marker".
type Assessment struct {
	Session  string          `json:"session"`
	CallID   string          `json:"call_id"`
	Tool     string          `json:"tool"`
	Task     string          `json:"task"`
	Key      string          `json:"key"`
	Contract effect.Contract `json:"contract"`
	Outcome  Outcome         `json:"outcome"`
	Evidence string          `json:"evidence"`
	Decision Decision        `json:"decision"`
	Attempts int             `json:"attempts"`
	Chain    []string        `json:"chain"`
}

// Request is a tool-call request an agent in any language publishes on
// jw.requests.<session>. A request published twice with the same RequestID
// runs at most once.
type Request struct {
	V              int             `json:"v"`
	RequestID      string          `json:"request_id"`
	Session        string          `json:"session"`
	Task           string          `json:"task"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	ProviderCallID string          `json:"provider_call_id,omitempty"`
}

// Answer is the durable answer to a tool request that could not become a
// call (jw.answers.<session>): the tool is unknown, the request is
// malformed or would not fit the session log once wrapped in its
// tool.call, or the session log is full or corrupt. Nothing was recorded on the
// session log and nothing was counted. An agent that published a request
// finds, for its request_id, either a tool.call on the session log or an
// Answer here (never both) — for its own request: another request under
// the same id (request_conflict) is answered here while the log holds the
// call of the request the id is bound to (RequestDigest tells them apart).
type Answer struct {
	V         int    `json:"v"`
	Session   string `json:"session"`
	RequestID string `json:"request_id"`
	// Code is why the request was refused: unknown_tool, invalid_request,
	// request_too_large, or — the session log can record nothing —
	// history_too_large (full) or corrupt_history.
	Code Code `json:"code"`
	// Message says what is wrong, for a person.
	Message string    `json:"message"`
	At      time.Time `json:"at"`
	// RequestDigest is the hex of the first 16 bytes of the digest of the
	// request answered (docs/protocol.md §12; the last part of its
	// Msg-Id): a request id is bound to its content, and an answer is the
	// answer to one request only, not to another published under the
	// same id. Empty in answers recorded before it existed.
	RequestDigest string `json:"request_digest,omitempty"`
}
