package recovery_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

func askedEv(id string, epoch uint64) schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: epoch, At: testAt, Type: schema.TypeApprovalRequested,
		ApprovalRequest: &schema.ApprovalRequest{CallID: id, Deadline: testAt.Add(time.Hour)}}
}

func grantedEv(t *testing.T, kp nkeys.KeyPair, id string, epoch uint64) schema.Event {
	t.Helper()
	a := signedApproval(t, kp, id, schema.Approved)
	return schema.Event{V: 1, Session: testSession, Epoch: epoch, At: testAt, Type: schema.TypeApprovalGranted, Approval: &a}
}

func stoppedEv(task string) schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeTaskStopped, Stop: &schema.Stop{Task: task, By: schema.StoppedByHost}}
}

func signedApproval(t *testing.T, kp nkeys.KeyPair, callID string, d schema.ApprovalDecision) schema.Approval {
	t.Helper()
	a, err := recovery.SignApproval(kp, schema.Approval{V: 1, Session: testSession, CallID: callID, Decision: d, Approver: "alice@ops", Reason: "ticket-9", At: "2026-11-29T10:05:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func approverKey(t *testing.T) (nkeys.KeyPair, recovery.TrustedKeys) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return kp, trusted
}

// TestVerifyApproval: an approval counts only signed by a trusted approver,
// unaltered, for its own session and call; forged, tampered, untrusted,
// unsigned and wrong-call approvals are invalid_approval.
func TestVerifyApproval(t *testing.T) {
	kp, trusted := approverKey(t)
	other, _ := approverKey(t)
	good := signedApproval(t, kp, "c-1", schema.Approved)
	if err := recovery.VerifyApproval(good, testSession, "c-1", trusted); err != nil {
		t.Fatalf("good approval: %v", err)
	}
	tampered := good
	tampered.Decision = schema.Denied
	flipped := signedApproval(t, kp, "c-1", schema.Denied)
	flipped.Decision = schema.Approved
	unsigned := good
	unsigned.Signer, unsigned.Sig = "", ""
	forged := good
	forged.Sig = signedApproval(t, other, "c-1", schema.Approved).Sig
	untrusted := signedApproval(t, other, "c-1", schema.Approved)
	reason := good
	reason.Reason = "ticket-10"
	for name, c := range map[string]struct {
		a       schema.Approval
		session string
		call    string
		keys    recovery.TrustedKeys
		cause   error
	}{
		"decision changed":                  {tampered, testSession, "c-1", trusted, recovery.ErrBadSignature},
		"denial made approval":              {flipped, testSession, "c-1", trusted, recovery.ErrBadSignature},
		"reason changed":                    {reason, testSession, "c-1", trusted, recovery.ErrBadSignature},
		"unsigned":                          {unsigned, testSession, "c-1", trusted, recovery.ErrUnsignedReview},
		"forged signature":                  {forged, testSession, "c-1", trusted, recovery.ErrBadSignature},
		"untrusted approver":                {untrusted, testSession, "c-1", trusted, recovery.ErrUntrustedSigner},
		"another call (a retry reusing it)": {good, testSession, "c-2", trusted, nil},
		"another session":                   {good, "s-2", "c-1", trusted, nil},
		"nobody trusted":                    {good, testSession, "c-1", nil, recovery.ErrUntrustedSigner},
	} {
		err := recovery.VerifyApproval(c.a, c.session, c.call, c.keys)
		if !errors.Is(err, schema.ErrInvalidApproval) {
			t.Errorf("%s: %v, want invalid_approval", name, err)
		}
		if c.cause != nil && !errors.Is(err, c.cause) {
			t.Errorf("%s: %v, want it to wrap %v", name, err, c.cause)
		}
	}
}

// TestInspectApprovalBoundary: a call waiting for approval is refused
// (approval_pending) by inspect and prepare, fenced or not; after the
// approval but before tool.started it is not_started; after tool.started
// uncertain (needs_review for a payment); a denial or timeout (rejected at
// approval) is not_started and retry_allowed.
func TestInspectApprovalBoundary(t *testing.T) {
	kp, _ := approverKey(t)
	pay := func(id string) schema.Event { return callEv(id, effect.NonIdempotent, true) }
	cases := map[string]struct {
		h        []schema.Event
		code     schema.Code
		outcome  schema.Outcome
		decision schema.Decision
	}{
		"waiting":                             {h: []schema.Event{pay("c-1"), askedEv("c-1", 1)}, code: schema.CodeApprovalPending},
		"waiting across a fence":              {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), fencedEv()}, code: schema.CodeApprovalPending},
		"approved, not started":               {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), grantedEv(t, kp, "c-1", 1), fencedEv()}, outcome: schema.OutcomeNotStarted, decision: schema.DecisionRetryAllowed},
		"approved by the next owner, started": {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), fencedEv(), grantedEv(t, kp, "c-1", 2), withEpoch(startedEv("c-1"), 2)}, outcome: schema.OutcomeUncertain, decision: schema.DecisionNeedsReview},
		"denied":                              {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), resultEv("c-1", schema.StatusRejected, schema.StageApproval)}, outcome: schema.OutcomeNotStarted, decision: schema.DecisionRetryAllowed},
		"approved and ok":                     {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), grantedEv(t, kp, "c-1", 1), startedEv("c-1"), resultEv("c-1", schema.StatusOK, "")}, outcome: schema.OutcomeCompleted, decision: schema.DecisionRefuse},
		"started without approval":            {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), startedEv("c-1")}, code: schema.CodeCorruptHistory},
		"ok without approval":                 {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), resultEv("c-1", schema.StatusOK, "")}, code: schema.CodeCorruptHistory},
		"approval honoured twice":             {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), grantedEv(t, kp, "c-1", 1), grantedEv(t, kp, "c-1", 1)}, code: schema.CodeCorruptHistory},
		"granted without asking":              {h: []schema.Event{pay("c-1"), grantedEv(t, kp, "c-1", 1)}, code: schema.CodeCorruptHistory},
		"asked twice":                         {h: []schema.Event{pay("c-1"), askedEv("c-1", 1), askedEv("c-1", 1)}, code: schema.CodeCorruptHistory},
		"asked after start":                   {h: []schema.Event{pay("c-1"), startedEv("c-1"), askedEv("c-1", 1)}, code: schema.CodeCorruptHistory},
		"asked for no call":                   {h: []schema.Event{pay("c-1"), askedEv("c-9", 1)}, code: schema.CodeCorruptHistory},
		"a call after its task stopped":       {h: []schema.Event{stoppedEv("t-1"), pay("c-1")}, code: schema.CodeCorruptHistory},
	}
	for name, c := range cases {
		a, err := recovery.Inspect(hist(c.h...), "c-1")
		if c.code != "" {
			if schema.CodeOf(err) != c.code {
				t.Errorf("%s: Inspect = %+v, %v; want %s", name, a, err, c.code)
			}
			if _, perr := recovery.PrepareRetry(hist(c.h...), "c-1", nil); schema.CodeOf(perr) != c.code {
				t.Errorf("%s: PrepareRetry = %v; want %s", name, perr, c.code)
			}
			continue
		}
		if err != nil || a.Outcome != c.outcome || a.Decision != c.decision {
			t.Errorf("%s: Inspect = %s/%s, %v; want %s/%s", name, a.Outcome, a.Decision, err, c.outcome, c.decision)
		}
	}
}

func withEpoch(e schema.Event, epoch uint64) schema.Event { e.Epoch = epoch; return e }

// TestPrepareRefusesStoppedTask: no plan for any call of a stopped task,
// whatever its outcome; another task of the session is planned as before.
func TestPrepareRefusesStoppedTask(t *testing.T) {
	other := with(callEv("c-2", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Task, c.Operation.Key = "t-2", "op-2" })
	h := []schema.Event{
		callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, ""),
		other, resultEv("c-2", schema.StatusFailed, ""),
		stoppedEv("t-1"),
	}
	if _, err := recovery.PrepareRetry(hist(h...), "c-1", nil); !errors.Is(err, schema.ErrTaskStopped) {
		t.Fatalf("plan for a stopped task's call: %v, want task_stopped", err)
	}
	if a, err := recovery.Inspect(hist(h...), "c-1"); err != nil || a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("inspect still classifies: %+v, %v", a, err)
	}
	if _, err := recovery.PrepareRetry(hist(h...), "c-2", nil); err != nil {
		t.Fatalf("another task: %v", err)
	}
}

// TestOpenCallsParked: a fence closes an open call of an older epoch but
// not one waiting for approval; once approved at the new epoch, a newer
// fence closes it.
func TestOpenCallsParked(t *testing.T) {
	kp, _ := approverKey(t)
	h := []schema.Event{callEv("c-1", effect.NonIdempotent, true), askedEv("c-1", 1), fencedEv()}
	for i := range h {
		h[i].Seq = uint64(i + 1)
	}
	if got := recovery.OpenIn(h, 0); len(got) != 1 || got[0] != "c-1" {
		t.Fatalf("open after the fence: %v, want [c-1]", got)
	}
	if ap := recovery.ApprovalsOf(h); len(ap.Pending) != 1 || ap.Pending[0].CallID != "c-1" || ap.Pending[0].Task != "t-1" {
		t.Fatalf("pending: %+v", ap.Pending)
	}
	fence3 := schema.Event{V: 1, Session: testSession, Epoch: 3, At: testAt, Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: 3}}
	h = append(h, grantedEv(t, kp, "c-1", 2), fence3)
	if got := recovery.OpenIn(h, 0); len(got) != 0 {
		t.Fatalf("approved at epoch 2, fenced at 3: still open %v", got)
	}
	if ap := recovery.ApprovalsOf(h); len(ap.Pending) != 0 || !ap.Granted["c-1"] {
		t.Fatalf("after the grant: %+v", ap)
	}
}
