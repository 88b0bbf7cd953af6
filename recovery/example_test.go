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

// A recovery worker signs the plan it issues; the runtime records the
// plan's signature in the retry's tool.call, so anyone with the planner's
// public key can check, from the log alone, that the retry was authorized.
func ExampleVerifyRetries() {
	planner, _ := nkeys.CreateUser()
	planners, _ := recovery.NewTrustedKeys(must(planner.PublicKey()))
	read := func(history string) schema.History {
		return schema.NewHistoryReader(strings.NewReader(history), schema.DefaultLimits).All()
	}
	const idem = `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"orders.create","arguments":{"sku":"A-1"},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"v1"}}}}
{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"tool.started","started":{"call_id":"c-1"}}
`
	plan, _ := recovery.PrepareRetry(read(idem), "c-1", nil)
	plan, _ = recovery.SignPlan(planner, plan)

	// the runtime runs the plan as call c-2 and records its link
	retry := schema.Event{V: 1, Seq: 3, Session: "s-1", Epoch: 1, At: time.Date(2026, 11, 29, 10, 0, 3, 0, time.UTC), Type: schema.TypeCall,
		Call: &schema.Call{CallID: "c-2", Tool: plan.Tool, Arguments: plan.Arguments, StartMarker: true,
			Operation: &schema.Operation{Task: plan.Task, Key: plan.Key, Contract: plan.Contract, Retry: &schema.RetryLink{
				PriorCallID: plan.PriorCallID, PriorSeq: plan.PriorSeq, PlanID: plan.PlanID, Basis: plan.Basis,
				IssuedAt: plan.IssuedAt, Signer: plan.Signer, Sig: plan.Sig}}}}
	line, _ := schema.EncodeEvent(retry)
	fmt.Println(recovery.VerifyRetries(read(idem+string(line)+"\n"), planners, nil))

	// a retry appended by someone else carries no plan signature
	forged := `{"v":1,"seq":3,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:03Z","type":"tool.call","call":{"call_id":"c-2","tool":"orders.create","arguments":{"sku":"A-1"},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"v1"},"retry":{"prior_call_id":"c-1","prior_seq":1,"plan_id":"p-1","basis":"uncertain_safe"}}}}` + "\n"
	err := recovery.VerifyRetries(read(idem+forged), planners, nil)
	fmt.Println(schema.CodeOf(err), errors.Is(err, recovery.ErrUnsignedPlan))
	_, err = recovery.PrepareRetry(read(idem+forged), "c-2", nil, recovery.RequireSignedPlans(planners, nil))
	fmt.Println(schema.CodeOf(err))
	// Output:
	// <nil>
	// unauthorized_retry true
	// unauthorized_retry
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// An operator found the order (completed); later someone publishes the
// earlier not_executed review again. Completed is final: the replay is a
// review_conflict, and the call stays refused.
func ExampleFoldReviews() {
	notExec := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "psp-431", Verdict: schema.VerdictNotExecuted}
	done := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "bob@ops", Evidence: "order ord-77", Verdict: schema.VerdictCompleted}
	f := recovery.FoldReviews("s-1", "c-1", []recovery.ReviewEntry{
		{Review: notExec, Seq: 1},
		{Review: done, Seq: 2},
		{Review: notExec, Seq: 3}, // the same review, published again
	})
	fmt.Println(f.Decides, f.Review.Verdict, f.Final)
	for i, err := range f.Rejected {
		if err == nil {
			fmt.Println(i, "stands")
		} else {
			fmt.Println(i, "rejected:", schema.CodeOf(err))
		}
	}
	// Output:
	// 1 completed true
	// 0 stands
	// 1 stands
	// 2 rejected: review_conflict
}
