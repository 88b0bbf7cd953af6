package schema

import (
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/jingwei/jingwei/effect"
)

// The wire types below are what the strict decoders of reviews, requests,
// plans and assessments unmarshal into with v2's reflection: the exported
// types' fields with pointers where a required member has a valid zero
// value (so that a missing one is seen), and an embedded fallback
// (json:",embed") that collects the members matching no field, so that
// checkCase can refuse case variants of the fields. They are converted to
// the exported types once checked. Events, the hot message, are decoded
// field by field instead (eventcodec.go), under the same rules.

// Field names of each object, for checkCase.
var (
	callFields       = []string{"call_id", "tool", "arguments", "request_id", "provider_call_id", "start_marker", "started", "operation"}
	startedFields    = []string{"call_id"}
	resultFields     = []string{"call_id", "status", "stage", "retryable", "output", "error"}
	fenceFields      = []string{"epoch", "owner"}
	operationFields  = []string{"task", "key", "contract", "retry"}
	contractFields   = []string{"effect", "revision"}
	retryFields      = []string{"prior_call_id", "prior_seq", "plan_id", "basis", "review", "issued_at", "signer", "sig"}
	reviewFields     = []string{"v", "session", "call_id", "operator", "evidence", "verdict", "probe", "at", "signer", "sig"}
	requestFields    = []string{"v", "request_id", "session", "task", "tool", "arguments", "provider_call_id"}
	planFields       = []string{"v", "plan_id", "session", "task", "tool", "arguments", "args_digest", "contract", "key", "prior_call_id", "prior_seq", "basis", "review", "issued_at", "signer", "sig"}
	assessmentFields = []string{"session", "call_id", "tool", "task", "key", "contract", "outcome", "evidence", "decision", "attempts", "chain"}
)

type wireContract struct {
	Effect   wireEffect     `json:"effect"`
	Revision string         `json:"revision"`
	Unknown  jsontext.Value `json:",embed"`
}

// wireEffect is a contract's effect: absent means effect.Unknown (docs/protocol.md
// §5.1), null is refused (no schema allows it), a string must be one of
// effect's wire values.
type wireEffect struct{ e effect.Effect }

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (w *wireEffect) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case 'n':
		_ = dec.SkipValue()
		return errNullEffect
	case '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		e, err := effect.Parse(tok.String())
		if err != nil {
			return err
		}
		w.e = e
		return nil
	}
	_ = dec.SkipValue()
	return errEffectType
}

type wireReview struct {
	V        int            `json:"v"`
	Session  string         `json:"session"`
	CallID   string         `json:"call_id"`
	Operator string         `json:"operator"`
	Evidence *string        `json:"evidence"`
	Verdict  Verdict        `json:"verdict"`
	Probe    string         `json:"probe"`
	At       string         `json:"at"`
	Signer   string         `json:"signer"`
	Sig      string         `json:"sig"`
	Unknown  jsontext.Value `json:",embed"`
}

type wireRequest struct {
	V              wholeNumber    `json:"v"`
	RequestID      string         `json:"request_id"`
	Session        string         `json:"session"`
	Task           string         `json:"task"`
	Tool           string         `json:"tool"`
	Arguments      jsontext.Value `json:"arguments"`
	ProviderCallID string         `json:"provider_call_id"`
	Unknown        jsontext.Value `json:",embed"`
}

type wirePlan struct {
	V           int            `json:"v"`
	PlanID      string         `json:"plan_id"`
	Session     string         `json:"session"`
	Task        string         `json:"task"`
	Tool        string         `json:"tool"`
	Arguments   jsontext.Value `json:"arguments"`
	ArgsDigest  string         `json:"args_digest"`
	Contract    *wireContract  `json:"contract"`
	Key         string         `json:"key"`
	PriorCallID string         `json:"prior_call_id"`
	PriorSeq    *uint64        `json:"prior_seq"`
	Basis       Basis          `json:"basis"`
	Review      wirePlanReview `json:"review"`
	IssuedAt    time.Time      `json:"issued_at"`
	Signer      string         `json:"signer"`
	Sig         string         `json:"sig"`
	Unknown     jsontext.Value `json:",embed"`
}

// wirePlanReview is a plan's review, a required member that may be null.
type wirePlanReview struct {
	set bool
	r   *wireReview
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (w *wirePlanReview) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	w.set = true
	if dec.PeekKind() == 'n' {
		return dec.SkipValue()
	}
	w.r = new(wireReview)
	return unmarshalDecode(dec, w.r)
}

type wireAssessment struct {
	Session  string         `json:"session"`
	CallID   string         `json:"call_id"`
	Tool     string         `json:"tool"`
	Task     string         `json:"task"`
	Key      string         `json:"key"`
	Contract *wireContract  `json:"contract"`
	Outcome  Outcome        `json:"outcome"`
	Evidence string         `json:"evidence"`
	Decision Decision       `json:"decision"`
	Attempts int            `json:"attempts"`
	Chain    []string       `json:"chain"`
	Unknown  jsontext.Value `json:",embed"`
}

// review converts a checked wire review.
func (w *wireReview) review() *Review {
	r := &Review{V: w.V, Session: w.Session, CallID: w.CallID, Operator: w.Operator, Verdict: w.Verdict, Probe: w.Probe, At: w.At, Signer: w.Signer, Sig: w.Sig}
	if w.Evidence != nil {
		r.Evidence = *w.Evidence
	}
	return r
}

func (w *wireContract) contract() effect.Contract {
	return effect.Contract{Effect: w.Effect.e, Revision: w.Revision}
}
