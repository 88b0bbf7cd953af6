package schema

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// Event types of approvals and task stops (docs/protocol.md §5.1, §17).
const (
	// TypeApprovalRequested is the pending-answer boundary of a call: the
	// call waits for a signed approval (body ApprovalRequest). It comes
	// after the call's tool.call and before its tool.started or result.
	TypeApprovalRequested = "approval.requested"
	// TypeApprovalGranted records the signed approval a call's body started
	// on (body Approval). It comes after the call's approval.requested,
	// once, and before its tool.started.
	TypeApprovalGranted = "approval.granted"
	// TypeTaskStopped stops a task of the session (body Stop): no call of
	// the task is recorded after it, and no plan is issued for its calls.
	TypeTaskStopped = "task.stopped"
)

// ApprovalRequest is the body of an approval.requested event. Deadline is
// when the call ends rejected at stage approval if no signed answer came
// (UTC, whole seconds).
type ApprovalRequest struct {
	CallID   string    `json:"call_id"`
	Deadline time.Time `json:"deadline"`
}

// ApprovalDecision is an approver's answer to an approval request.
type ApprovalDecision string

// Approval decisions.
const (
	Approved ApprovalDecision = "approved"
	Denied   ApprovalDecision = "denied"
)

// Valid reports whether d is approved or denied.
func (d ApprovalDecision) Valid() bool { return d == Approved || d == Denied }

// Approval is a signed answer to one call's approval request
// (jw.approvals.<session>), and the body of approval.granted. It is bound
// to one call id: a retry has a new call id and needs an approval of its
// own. Signer is an nkey user public key (a trusted approver's), Sig its
// ed25519 signature (unpadded base64url) over the RFC 8785 form of the
// approval without sig (recovery.SignApproval).
type Approval struct {
	V        int              `json:"v"`
	Session  string           `json:"session"`
	CallID   string           `json:"call_id"`
	Decision ApprovalDecision `json:"decision"`
	Approver string           `json:"approver"`
	Reason   string           `json:"reason,omitempty"`
	At       string           `json:"at,omitempty"`
	Signer   string           `json:"signer,omitempty"`
	Sig      string           `json:"sig,omitempty"`
}

// AskedApproval is what a tool worker publishes on
// jw.approvals.<session>.request when a call starts waiting for approval:
// enough for an approver to decide without reading the session log.
type AskedApproval struct {
	V          int             `json:"v"`
	Session    string          `json:"session"`
	CallID     string          `json:"call_id"`
	Task       string          `json:"task"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	ArgsDigest string          `json:"args_digest"`
	Deadline   time.Time       `json:"deadline"`
	At         time.Time       `json:"at"`
}

// Stop is the body of a task.stopped event. By says who stopped it:
// "host" (an explicit stop) or "budget" (the task's tool_calls limit was
// exhausted).
type Stop struct {
	Task   string `json:"task"`
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// Who stops a task.
const (
	StoppedByHost   = "host"
	StoppedByBudget = "budget"
)

var (
	approvalRequestFields = []string{"call_id", "deadline"}
	approvalFields        = []string{"v", "session", "call_id", "decision", "approver", "reason", "at", "signer", "sig"}
	stopFields            = []string{"task", "by", "reason"}
)

type wireApprovalRequest struct {
	CallID   string         `json:"call_id"`
	Deadline time.Time      `json:"deadline"`
	Unknown  jsontext.Value `json:",embed"`
}

type wireApproval struct {
	V        int              `json:"v"`
	Session  string           `json:"session"`
	CallID   string           `json:"call_id"`
	Decision ApprovalDecision `json:"decision"`
	Approver string           `json:"approver"`
	Reason   string           `json:"reason"`
	At       string           `json:"at"`
	Signer   string           `json:"signer"`
	Sig      string           `json:"sig"`
	Unknown  jsontext.Value   `json:",embed"`
}

type wireStop struct {
	Task    string         `json:"task"`
	By      string         `json:"by"`
	Reason  string         `json:"reason"`
	Unknown jsontext.Value `json:",embed"`
}

func (w *wireApprovalRequest) checkCase(path string) error {
	return checkCase(path+": ", w.Unknown, approvalRequestFields)
}
func (w *wireApproval) checkCase(path string) error {
	return checkCase(path+": ", w.Unknown, approvalFields)
}
func (w *wireStop) checkCase(path string) error { return checkCase(path+": ", w.Unknown, stopFields) }

func (w *wireApproval) approval() *Approval {
	return &Approval{V: w.V, Session: w.Session, CallID: w.CallID, Decision: w.Decision, Approver: w.Approver,
		Reason: w.Reason, At: w.At, Signer: w.Signer, Sig: w.Sig}
}

// readApprovalRequest, readApproval and readStop read the bodies of the
// approval and stop events (rare events: by reflection, under the same
// strict rules as the rest).
func readApprovalRequest(d *eventReader) (*ApprovalRequest, error) {
	var w wireApprovalRequest
	if err := d.reflect(&w); err != nil {
		return nil, err
	}
	if err := w.checkCase("approval_request"); err != nil {
		return nil, err
	}
	return &ApprovalRequest{CallID: w.CallID, Deadline: w.Deadline}, nil
}

func readApproval(d *eventReader) (*Approval, error) {
	var w wireApproval
	if err := d.reflect(&w); err != nil {
		return nil, err
	}
	if err := w.checkCase("approval"); err != nil {
		return nil, err
	}
	return w.approval(), nil
}

func readStop(d *eventReader) (*Stop, error) {
	var w wireStop
	if err := d.reflect(&w); err != nil {
		return nil, err
	}
	if err := w.checkCase("stop"); err != nil {
		return nil, err
	}
	return &Stop{Task: w.Task, By: w.By, Reason: w.Reason}, nil
}

// checkApprovalRequest checks an approval.requested body.
func checkApprovalRequest(r *ApprovalRequest, _ string) error {
	if err := checkID("approval_request.call_id", r.CallID); err != nil {
		return err
	}
	if r.Deadline.IsZero() {
		return Errorf(CodeCorruptHistory, "approval_request lacks deadline")
	}
	return nil
}

// checkApprovalGranted checks an approval.granted body: a valid approval
// of the event's session that approves.
func checkApprovalGranted(a *Approval, session string) error {
	if err := a.check(CodeCorruptHistory); err != nil {
		return err
	}
	if a.Decision != Approved {
		return Errorf(CodeCorruptHistory, "approval.granted carries decision %q, want approved", a.Decision)
	}
	if a.Session != session {
		return Errorf(CodeCorruptHistory, "approval.granted carries an approval of session %q", a.Session)
	}
	return nil
}

// checkStop checks a task.stopped body.
func checkStop(s *Stop, _ string) error {
	if !ValidSession(s.Task) {
		return Errorf(CodeCorruptHistory, "stop.task %s must be 1-128 bytes of [A-Za-z0-9_-]", quoteShort([]byte(s.Task)))
	}
	if s.By != StoppedByHost && s.By != StoppedByBudget {
		return Errorf(CodeCorruptHistory, "stop.by %s must be host or budget", quoteShort([]byte(s.By)))
	}
	return checkLen("stop.reason", s.Reason)
}

// Validate checks an approval's fields as approval.schema.json does:
// version 1, a valid session id, a call id, approved or denied, a
// non-blank approver, reason and approver at most MaxFieldBytes, and
// signer and sig together and well formed. Errors are *Error with code
// invalid_approval (field_too_long for a field over the limit).
func (a *Approval) Validate() error { return a.check(CodeInvalidApproval) }

func (a *Approval) check(bad Code) error {
	fail := func(format string, args ...any) error { return Errorf(bad, format, args...) }
	switch {
	case a.V != Version:
		return fail("approval has schema version %d, want %d", a.V, Version)
	case !ValidSession(a.Session):
		return fail("approval.session %s is not a valid session id", quoteShort([]byte(a.Session)))
	case a.CallID == "":
		return fail("approval lacks call_id")
	case !a.Decision.Valid():
		return fail("approval.decision %s must be approved or denied", quoteShort([]byte(a.Decision)))
	case strings.TrimSpace(a.Approver) == "":
		return fail("approval has a blank approver")
	case (a.Signer == "") != (a.Sig == ""):
		return fail("approval signer and sig come together or not at all")
	}
	for _, f := range []struct{ name, v string }{{"approval.call_id", a.CallID}, {"approval.approver", a.Approver}, {"approval.reason", a.Reason}} {
		if err := checkLen(f.name, f.v); err != nil {
			return err
		}
	}
	if a.At != "" {
		if _, err := time.Parse(time.RFC3339, a.At); err != nil {
			return fail("approval.at %s is not an RFC 3339 time", quoteShort([]byte(a.At)))
		}
	}
	if a.Sig != "" {
		if _, err := base64.RawURLEncoding.DecodeString(a.Sig); err != nil {
			return fail("approval.sig is not unpadded base64url")
		}
	}
	return nil
}

// DecodeApproval decodes an approval message strictly (the rules of
// DecodeReview): malformed JSON, duplicate or case-variant member names
// and invalid fields are invalid_approval. The signature is checked by
// recovery.VerifyApproval.
func DecodeApproval(b []byte) (Approval, error) {
	if firstByte(b) != '{' {
		return Approval{}, Errorf(CodeInvalidApproval, "approval is not a JSON object")
	}
	var w wireApproval
	if err := strictUnmarshal(b, &w); err != nil {
		return Approval{}, Errorf(CodeInvalidApproval, "approval is not valid: %s", describe(err))
	}
	if err := checkCase("", w.Unknown, approvalFields); err != nil {
		return Approval{}, Errorf(CodeInvalidApproval, "approval is not valid: %s", describe(err))
	}
	a := w.approval()
	if err := a.Validate(); err != nil {
		return Approval{}, err
	}
	return *a, nil
}

// StopRequest is a host's request to stop a task
// (jw.approvals.<session>.stop): the session's owner records it as
// task.stopped (by "host").
type StopRequest struct {
	V       int    `json:"v"`
	Session string `json:"session"`
	Task    string `json:"task"`
	Reason  string `json:"reason,omitempty"`
	At      string `json:"at,omitempty"`
}

// Validate checks a stop request: version 1, valid session and task ids,
// a reason of at most MaxFieldBytes. Errors are bad_request (field_too_long
// for the reason).
func (s *StopRequest) Validate() error {
	switch {
	case s.V != Version:
		return Errorf(CodeBadRequest, "stop request has schema version %d, want %d", s.V, Version)
	case !ValidSession(s.Session):
		return Errorf(CodeBadRequest, "stop request session %s is not a valid session id", quoteShort([]byte(s.Session)))
	case !ValidSession(s.Task):
		return Errorf(CodeBadRequest, "stop request task %s must be 1-128 bytes of [A-Za-z0-9_-]", quoteShort([]byte(s.Task)))
	}
	return checkLen("reason", s.Reason)
}
