package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// answerOutcome is what approve and deny print with --json: the signed
// answer, where it was published, and what became of it.
type answerOutcome struct {
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

// answerState is what a session's log says of an answer to callID.
type answerState int

const (
	stateWaiting  answerState = iota // the call still waits for approval
	stateGranted                     // approval.granted is on the log
	stateRejected                    // the call ended rejected at stage approval
	stateOther                       // never asked, or ended otherwise
)

// readAnswerState reads the session's log (jw.api.history, which the
// reviewer role may ask) and says where callID stands, with the sequence
// of the event that decided it.
func readAnswerState(ctx context.Context, api *apiClient, session, callID string) (answerState, uint64, []schema.Event, error) {
	h, err := loadViaService(ctx, api.Client, session, schema.DefaultLimits)
	if err != nil {
		return stateOther, 0, nil, err
	}
	ap := recovery.ApprovalsOf(h)
	for _, p := range ap.Pending {
		if p.CallID == callID {
			return stateWaiting, p.Seq, h, nil
		}
	}
	for i := len(h) - 1; i >= 0; i-- {
		ev := &h[i]
		switch {
		case ev.Type == schema.TypeApprovalGranted && ev.Approval != nil && ev.Approval.CallID == callID:
			return stateGranted, ev.Seq, h, nil
		case ev.Result != nil && ev.Result.CallID == callID && ev.Result.Status == schema.StatusRejected && ev.Result.Stage == schema.StageApproval:
			return stateRejected, ev.Seq, h, nil
		}
	}
	return stateOther, 0, h, nil
}

// notWaiting is the refusal of an answer for a call that does not wait.
func notWaiting(session, callID string, st answerState, seq uint64, h []schema.Event) error {
	why := "it never asked for approval (jingwei status lists the calls awaiting approval)"
	switch {
	case len(h) == 0:
		why = "the session has no events on the log"
	case st == stateGranted:
		why = fmt.Sprintf("it was approved already (approval.granted at seq %d)", seq)
	case st == stateRejected:
		why = fmt.Sprintf("it ended rejected at stage approval (denied or timed out, seq %d)", seq)
	}
	return schema.Errorf(schema.CodeNotWaiting, "call %s of session %s does not wait for approval: %s; nothing published", callID, session, why)
}

// awaitAnswer polls the session's log until the call no longer waits or
// wait has passed. The answer d counts when the log shows its effect;
// anything else is refused: invalid_approval when the call still waits
// (the tool worker did not honour the answer: an untrusted signer, or no
// tool worker for the session), not_waiting when the call ended otherwise
// first.
func awaitAnswer(ctx context.Context, api *apiClient, a schema.Approval, wait time.Duration, authDir string) (answerOutcome, error) {
	out := answerOutcome{Approval: a}
	deadline := time.Now().Add(wait)
	for {
		st, seq, h, err := readAnswerState(ctx, api, a.Session, a.CallID)
		if err != nil {
			return out, err
		}
		switch {
		case st == stateGranted && a.Decision == schema.Approved, st == stateRejected && a.Decision == schema.Denied:
			out.Outcome, out.Seq = "accepted", seq
			return out, nil
		case st != stateWaiting:
			return out, schema.Errorf(schema.CodeNotWaiting, "answer published, but the call ended otherwise before it was honoured (%s)", notWaiting(a.Session, a.CallID, st, seq, h))
		}
		if time.Now().After(deadline) {
			return out, schema.Errorf(schema.CodeInvalidApproval, "answer published (it stays in JW_APPROVALS), but the call still waits after %s: %s", wait, untrustedHint(a.Signer, authDir))
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// untrustedHint says why a tool worker may not have honoured an answer
// signed by signer: definitely untrusted when <authDir>/approvers (the
// tool workers' default trust list) is readable here and lacks it.
func untrustedHint(signer, authDir string) string {
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
