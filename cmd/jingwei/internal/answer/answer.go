// Package answer follows a signed approval or denial (jingwei approve,
// jingwei deny) on a session's log: where the call it answers stands, the
// refusal of an answer for a call that does not wait, and the wait for the
// answer's effect once it is published.
package answer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// Outcome is what approve and deny print with --json: the signed answer,
// where it was published, and what became of it.
type Outcome struct {
	Approval schema.Approval `json:"approval"`
	Subject  string          `json:"subject"`
	// Outcome is "accepted": the session's tool worker recorded the
	// answer's effect (approval.granted, or the call's result rejected at
	// stage approval for a denial); "published" with --wait 0: not waited
	// for.
	Outcome string `json:"outcome"`
	// Seq is the sequence of the event on the session log that shows it.
	Seq uint64 `json:"seq"`
}

// State is what a session's log says of an answer to a call.
type State int

const (
	Waiting  State = iota // the call still waits for approval
	Granted               // approval.granted is on the log
	Rejected              // the call ended rejected at stage approval
	Other                 // never asked, or ended otherwise
)

// LoadFunc reads a session's whole log (the CLI reads it through
// jw.api.history, which the reviewer role may ask).
type LoadFunc func(ctx context.Context, session string) ([]schema.Event, error)

// StateOf says where callID stands in the history h, with the sequence of
// the event that decided it (of the pending approval while it waits).
func StateOf(h []schema.Event, callID string) (State, uint64) {
	ap := recovery.ApprovalsOf(h)
	for _, p := range ap.Pending {
		if p.CallID == callID {
			return Waiting, p.Seq
		}
	}
	for i := len(h) - 1; i >= 0; i-- {
		ev := &h[i]
		switch {
		case ev.Type == schema.TypeApprovalGranted && ev.Approval != nil && ev.Approval.CallID == callID:
			return Granted, ev.Seq
		case ev.Result != nil && ev.Result.CallID == callID && ev.Result.Status == schema.StatusRejected && ev.Result.Stage == schema.StageApproval:
			return Rejected, ev.Seq
		}
	}
	return Other, 0
}

// Read loads the session's log and says where callID stands (StateOf),
// returning the history it read too.
func Read(ctx context.Context, load LoadFunc, session, callID string) (State, uint64, []schema.Event, error) {
	h, err := load(ctx, session)
	if err != nil {
		return Other, 0, nil, err
	}
	st, seq := StateOf(h, callID)
	return st, seq, h, nil
}

// NotWaiting is the refusal (not_waiting) of an answer for a call that
// does not wait, saying why from st, seq and the history h.
func NotWaiting(session, callID string, st State, seq uint64, h []schema.Event) error {
	why := "it never asked for approval (jingwei status lists the calls awaiting approval)"
	switch {
	case len(h) == 0:
		why = "the session has no events on the log"
	case st == Granted:
		why = fmt.Sprintf("it was approved already (approval.granted at seq %d)", seq)
	case st == Rejected:
		why = fmt.Sprintf("it ended rejected at stage approval (denied or timed out, seq %d)", seq)
	}
	return schema.Errorf(schema.CodeNotWaiting, "call %s of session %s does not wait for approval: %s; nothing published", callID, session, why)
}

// PollInterval is how often Await reads the log again.
const PollInterval = 200 * time.Millisecond

// Await polls the session's log until the call no longer waits or wait has
// passed. The answer a counts when the log shows its effect; anything else
// is refused: invalid_approval when the call still waits (the tool worker
// did not honour the answer: an untrusted signer, or no tool worker for
// the session), not_waiting when the call ended otherwise first. authDir
// (may be "") is where the tool workers' default trust list is looked for
// to say which.
func Await(ctx context.Context, load LoadFunc, a schema.Approval, wait time.Duration, authDir string) (Outcome, error) {
	out := Outcome{Approval: a}
	deadline := time.Now().Add(wait)
	for {
		st, seq, h, err := Read(ctx, load, a.Session, a.CallID)
		if err != nil {
			return out, err
		}
		switch {
		case st == Granted && a.Decision == schema.Approved, st == Rejected && a.Decision == schema.Denied:
			out.Outcome, out.Seq = "accepted", seq
			return out, nil
		case st != Waiting:
			return out, schema.Errorf(schema.CodeNotWaiting, "answer published, but the call ended otherwise before it was honoured (%s)", NotWaiting(a.Session, a.CallID, st, seq, h))
		}
		if time.Now().After(deadline) {
			return out, schema.Errorf(schema.CodeInvalidApproval, "answer published (it stays in JW_APPROVALS), but the call still waits after %s: %s", wait, UntrustedHint(a.Signer, authDir))
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(PollInterval):
		}
	}
}

// UntrustedHint says why a tool worker may not have honoured an answer
// signed by signer: definitely untrusted when <authDir>/approvers (the
// tool workers' default trust list) is readable here and lacks it.
func UntrustedHint(signer, authDir string) string {
	if authDir != "" {
		file := filepath.Join(authDir, "approvers")
		if b, err := os.ReadFile(file); err == nil {
			if t, _, err := recovery.ParseNamedKeys(b); err == nil && !t.Has(signer) {
				return fmt.Sprintf("the signer %s is not in %s, the tool workers' default trusted approvers (--trust-approvers): unless they were given another file, the tool worker refused it; sign with a trusted key (jingwei keys pub --key FILE prints yours)", signer, file)
			}
		}
	}
	return fmt.Sprintf("the tool worker did not honour it: its signer %s is not among the tool workers' trusted approvers (worker --trust-approvers), or no tool worker runs for the session (then the answer is judged when one takes it)", signer)
}
