package recovery_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// A payment call timed out after its body started: nobody knows whether the
// card was charged. The tool is non-idempotent, so a retry needs a review.
const exampleHistory = `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"payments.charge","arguments":{"amount":1200,"card":"tok_1"},"start_marker":true,"operation":{"task":"t-1","key":"op-7","contract":{"effect":"non_idempotent","revision":"pay-v1"}}}}
{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"tool.started","started":{"call_id":"c-1"}}
{"v":1,"seq":3,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:32Z","type":"tool.result","result":{"call_id":"c-1","status":"timeout","retryable":true}}
`

func ExampleInspect() {
	h := schema.NewHistoryReader(strings.NewReader(exampleHistory), schema.DefaultLimits).All()
	a, err := recovery.Inspect(h, "c-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Outcome, a.Evidence, a.Decision, a.Chain)
	// Output: uncertain timeout needs_review [c-1]
}

func ExamplePrepareRetry() {
	read := func() schema.History {
		return schema.NewHistoryReader(strings.NewReader(exampleHistory), schema.DefaultLimits).All()
	}
	// Without a review the planner refuses.
	_, err := recovery.PrepareRetry(read(), "c-1", nil)
	fmt.Println(schema.CodeOf(err))

	// An operator checked the payment provider: the charge never arrived.
	review := &schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "psp-ticket-431", Verdict: schema.VerdictNotExecuted}
	clock := func() time.Time { return time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC) }
	p, err := recovery.PrepareRetry(read(), "c-1", review, recovery.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Basis, p.Key, p.PriorCallID, p.PriorSeq, string(p.Arguments))
	fmt.Println(p.PlanID == recovery.PlanID("s-1", "c-1"), p.IssuedAt.Format(time.RFC3339))
	// Output:
	// needs_review
	// reviewed_not_executed op-7 c-1 1 {"amount":1200,"card":"tok_1"}
	// true 2026-11-29T11:00:00Z
}

func ExampleVerifyReview() {
	kp, _ := nkeys.CreateUser() // a reviewer's key; its public key is trusted
	pub, _ := kp.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)

	r := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "psp-ticket-431", Verdict: schema.VerdictNotExecuted}
	signed, _ := recovery.SignReview(kp, r)
	fmt.Println(recovery.VerifyReview(signed, trusted))

	signed.Verdict = schema.VerdictCompleted // changed after signing
	err := recovery.VerifyReview(signed, trusted)
	fmt.Println(schema.CodeOf(err), errors.Is(err, recovery.ErrBadSignature))
	// Output:
	// <nil>
	// invalid_review true
}
