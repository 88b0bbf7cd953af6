package recovery

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
)

// approvalPayload is the byte string an approval signature covers: the RFC
// 8785 form of the approval's JSON without sig (the rule of reviews).
func approvalPayload(a schema.Approval) ([]byte, error) {
	a.Sig = ""
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return canonical(b)
}

// SignApproval returns a signed by kp, which must be an nkey user key
// pair: Signer is set to kp's public key and Sig to the unpadded base64url
// ed25519 signature over the RFC 8785 form of the approval without sig —
// the signing rule of reviews (docs/protocol.md §6.3).
func SignApproval(kp nkeys.KeyPair, a schema.Approval) (schema.Approval, error) {
	signer, sig, err := sign(kp, func(pub string) ([]byte, error) {
		a.Signer = pub
		return approvalPayload(a)
	})
	if err != nil {
		return schema.Approval{}, fmt.Errorf("recovery: sign approval: %w", err)
	}
	a.Signer, a.Sig = signer, sig
	return a, nil
}

// invalidApproval returns an invalid_approval error that also matches
// cause under errors.Is.
func invalidApproval(cause error, format string, args ...any) error {
	e := schema.Errorf(schema.CodeInvalidApproval, format, args...)
	if cause == nil {
		return e
	}
	return fmt.Errorf("%w (%w)", e, cause)
}

// VerifyApproval checks that a is well formed (schema.Approval.Validate),
// for session and callID, and signed by a key in approvers: the checks of
// VerifyReview with the approver keys. Errors are invalid_approval (wrapping
// ErrUnsignedReview, ErrNotUserKey, ErrUntrustedSigner or ErrBadSignature
// for the signature), or field_too_long. A nil or empty approvers trusts
// no one.
func VerifyApproval(a schema.Approval, session, callID string, approvers TrustedKeys) error {
	if err := a.Validate(); err != nil {
		return err
	}
	switch {
	case a.Session != session:
		return invalidApproval(nil, "approval is for session %q, not %q", a.Session, session)
	case a.CallID != callID:
		return invalidApproval(nil, "approval is for call %q, not %q: an approval is bound to one call", a.CallID, callID)
	case a.Signer == "" || a.Sig == "":
		return invalidApproval(ErrUnsignedReview, "approval of call %q by %q is not signed", a.CallID, a.Approver)
	}
	if cause, msg := checkSig("approval", "approver", a.Signer, a.Sig, approvers, func() ([]byte, error) { return approvalPayload(a) }); cause != nil {
		return invalidApproval(cause, "%s", msg)
	}
	return nil
}

// PendingApproval is a call of a confirmed history that waits for
// approval: its approval.requested has no approval.granted and the call
// no result.
type PendingApproval struct {
	// CallID, Tool, Task and Arguments are the call's.
	CallID    string
	Tool      string
	Task      string
	Arguments json.RawMessage
	// Call is the call's tool.call event (with its seq); Seq the seq of
	// the approval.requested.
	Call schema.Event
	Seq  uint64
	// Deadline is when the call ends rejected at stage approval.
	Deadline time.Time
}

// Approvals is what a history says about approvals and stopped tasks.
type Approvals struct {
	// Pending are the calls waiting for approval, in log order.
	Pending []PendingApproval
	// Stopped maps every stopped task to its task.stopped body.
	Stopped map[string]schema.Stop
	// Granted holds the calls whose approval.granted is on the log.
	Granted map[string]bool
}

// ApprovalsOf reads what h (a session history in log order, as loaded)
// says about approvals and stopped tasks. It does not verify the history
// (Inspect does); events it cannot place are ignored.
func ApprovalsOf(h []schema.Event) Approvals {
	out := Approvals{Stopped: map[string]schema.Stop{}, Granted: map[string]bool{}}
	calls := map[string]int{}
	pending := map[string]int{} // call id → index in out.Pending
	for i := range h {
		ev := &h[i]
		switch {
		case ev.Call != nil:
			calls[ev.Call.CallID] = i
		case ev.ApprovalRequest != nil:
			ci, ok := calls[ev.ApprovalRequest.CallID]
			if !ok || h[ci].Call.Operation == nil {
				continue
			}
			c := h[ci].Call
			pending[c.CallID] = len(out.Pending)
			out.Pending = append(out.Pending, PendingApproval{CallID: c.CallID, Tool: c.Tool, Task: c.Operation.Task,
				Arguments: c.Arguments, Call: h[ci], Seq: ev.Seq, Deadline: ev.ApprovalRequest.Deadline})
		case ev.Approval != nil && ev.Type == schema.TypeApprovalGranted:
			out.Granted[ev.Approval.CallID] = true
			drop(&out.Pending, pending, ev.Approval.CallID)
		case ev.Result != nil:
			drop(&out.Pending, pending, ev.Result.CallID)
		case ev.Stop != nil:
			out.Stopped[ev.Stop.Task] = *ev.Stop
		}
	}
	kept := out.Pending[:0]
	for _, p := range out.Pending {
		if p.CallID != "" {
			kept = append(kept, p)
		}
	}
	out.Pending = kept
	return out
}

func drop(l *[]PendingApproval, at map[string]int, callID string) {
	if i, ok := at[callID]; ok {
		(*l)[i] = PendingApproval{}
		delete(at, callID)
	}
}

// onMark checks an approval or stop event against the calls it refers to
// (docs/protocol.md §17): approval.requested once per call, after its
// tool.call and before its start or result; approval.granted once, after
// the call's approval.requested and before its start or result;
// task.stopped of a task with an operation. Anything else is
// corrupt_history.
func (s *scan) onMark(ev *schema.Event) error {
	switch ev.Type {
	case schema.TypeTaskStopped:
		if s.stopped == nil {
			s.stopped = make(map[string]uint64)
		}
		if _, ok := s.stopped[ev.Stop.Task]; !ok {
			s.stopped[ev.Stop.Task] = ev.Seq
		}
		return nil
	case schema.TypeApprovalRequested:
		c, err := s.lookup(ev, ev.ApprovalRequest.CallID, "approval.requested")
		if err != nil {
			return err
		}
		switch {
		case c.combined:
			return s.corrupt(ev, "approval.requested for call %q, whose tool.call recorded it admitted and started (started: true): its body may already have run", c.id)
		case c.asked:
			return s.corrupt(ev, "second approval.requested for call %q", c.id)
		case c.started || c.resSeq != 0:
			return s.corrupt(ev, "approval.requested for call %q after its tool.started or result", c.id)
		case c.legacy:
			return s.corrupt(ev, "approval.requested for call %q, which has no operation", c.id)
		}
		c.asked = true
	case schema.TypeApprovalGranted:
		c, err := s.lookup(ev, ev.Approval.CallID, "approval.granted")
		if err != nil {
			return err
		}
		switch {
		case c.combined:
			return s.corrupt(ev, "approval.granted for call %q, whose tool.call recorded it admitted and started (started: true): its body may already have run", c.id)
		case !c.asked:
			return s.corrupt(ev, "approval.granted for call %q, which never asked for approval", c.id)
		case c.granted:
			return s.corrupt(ev, "second approval.granted for call %q: an approval is honoured once", c.id)
		case c.started || c.resSeq != 0:
			return s.corrupt(ev, "approval.granted for call %q after its tool.started or result", c.id)
		}
		c.granted = true
	}
	return nil
}

// pendingApproval refuses a call that waits for approval: it is neither
// classified nor planned until it is approved, denied or timed out.
func (c *call) pendingApproval() error {
	if c.asked && !c.granted && c.resSeq == 0 {
		return schema.Errorf(schema.CodeApprovalPending, "call %q waits for approval (approval.requested, no answer on the log yet): approve or deny it, or wait for its deadline", c.id)
	}
	return nil
}

// taskStopped refuses a plan for a call of a stopped task.
func (s *scan) taskStopped(a schema.Assessment) error {
	if at, ok := s.stopped[a.Task]; ok {
		return schema.Errorf(schema.CodeTaskStopped, "call %q belongs to task %q, stopped at seq %d: no plan for a stopped task", a.CallID, a.Task, at)
	}
	return nil
}
