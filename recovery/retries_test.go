package recovery_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// prepared is PrepareRetry's unsigned plan for callID in evs.
func prepared(t testing.TB, evs []schema.Event, callID string, rv *schema.Review) schema.Plan {
	t.Helper()
	p, err := recovery.PrepareRetry(hist(evs...), callID, rv, recovery.WithClock(planClock))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// link returns e with its retry link changed by f.
func link(e schema.Event, f func(l *schema.RetryLink)) schema.Event {
	return with(e, func(c *schema.Call) { f(c.Operation.Retry) })
}

// cat concatenates event lists.
func cat(lists ...[]schema.Event) []schema.Event {
	var out []schema.Event
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// TestVerifyRetries runs every retry of a history through VerifyRetries, and
// the same history through PrepareRetry with RequireSignedPlans for the
// latest call of the chain: both must reach the same verdict, with the same
// reason. Passing histories plan exactly as without the option.
func TestVerifyRetries(t *testing.T) {
	k := newKeys(t)
	// an idempotent call that failed: a retry is uncertain_safe
	idem := []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, "")}
	safe := prepared(t, idem, "c-1", nil)
	safeRetry := runtimeRetry(signPlan(t, k.planner, safe), "c-2", nil)
	// a non-idempotent call that timed out: a retry needs a not_executed review
	nonIdem := []schema.Event{callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusTimeout, "")}
	trustedReview := signReview(t, k.reviewer, *review(schema.VerdictNotExecuted))
	reviewed := prepared(t, nonIdem, "c-1", trustedReview)
	reviewedRetry := runtimeRetry(signPlan(t, k.planner, reviewed), "c-2", nil)
	// reviewedWith signs the reviewed plan with its review replaced by rv
	reviewedWith := func(rv *schema.Review) schema.Event {
		p := reviewed
		p.Review = rv
		return runtimeRetry(signPlan(t, k.planner, p), "c-2", nil)
	}
	// a second logical action with its own key in the same history
	other := func(id string) schema.Event {
		return with(callEv(id, effect.Idempotent, true), func(c *schema.Call) { c.Operation.Key = "op-2" })
	}
	forgedNotStarted := func() schema.Event {
		p := prepared(t, idem, "c-1", nil)
		p.Basis = schema.BasisNotStarted
		return runtimeRetry(signPlan(t, k.outsider, p), "c-2", nil)
	}()
	// a three-attempt chain, every retry planned and signed
	three := cat(idem, []schema.Event{safeRetry, resultEv("c-2", schema.StatusRejected, schema.StageApproval)})
	three = append(three, runtimeRetry(signPlan(t, k.planner, prepared(t, three, "c-2", nil)), "c-3", nil), startedEv("c-3"))

	tests := []struct {
		name   string
		events []schema.Event
		target string // the call PrepareRetry plans for
		// planners overrides k.planners when set
		planners recovery.TrustedKeys
		is       error // nil: authorized
		msg      []string
	}{
		{"no retries", idem, "c-1", nil, nil, nil},
		{"signed uncertain_safe", cat(idem, []schema.Event{safeRetry, resultEv("c-2", schema.StatusTimeout, "")}), "c-2", nil, nil, nil},
		{"signed, arguments as the caller wrote them", cat(idem, []schema.Event{
			with(safeRetry, func(c *schema.Call) { c.Arguments = []byte(`{ "qty": 2.0, "sku": "A-1" }`) }), startedEv("c-2")}), "c-2", nil, nil, nil},
		{"signed reviewed_not_executed", cat(nonIdem, []schema.Event{reviewedRetry, startedEv("c-2")}), "c-2", nil, nil, nil},
		{"three attempts", three, "c-3", nil, nil, nil},

		// retries nobody (trusted) planned
		{"unsigned retry", cat(idem, []schema.Event{retryEv("c-2", effect.Idempotent, "c-1", 1)}), "c-2", nil, recovery.ErrUnsignedPlan,
			[]string{`"c-2"`, "seq 4", `"c-1"`, "not signed"}},
		{"forged retry that never started", cat(idem, []schema.Event{forgedNotStarted}), "c-2", nil, recovery.ErrUntrustedSigner,
			[]string{`"c-2"`, "seq 4", "not a trusted planner key"}},
		{"plan signed by a reviewer key", cat(idem, []schema.Event{runtimeRetry(signPlan(t, k.reviewer, safe), "c-2", nil)}), "c-2", nil, recovery.ErrUntrustedSigner, []string{"seq 4"}},
		{"no trusted planners", cat(idem, []schema.Event{safeRetry}), "c-2", recovery.TrustedKeys{}, recovery.ErrUntrustedSigner, []string{"seq 4"}},
		{"unsigned retry early in the chain", cat(idem, []schema.Event{retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusFailed, "")},
			[]schema.Event{runtimeRetry(signPlan(t, k.planner, prepared(t, cat(idem, []schema.Event{retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusFailed, "")}), "c-2", nil)), "c-3", nil)}),
			"c-3", nil, recovery.ErrUnsignedPlan, []string{`"c-2"`, "seq 4"}},

		// signed plans replayed or changed in the log
		{"another action's plan", cat(idem, []schema.Event{safeRetry, other("d-1"), resultEv("d-1", schema.StatusFailed, ""),
			with(safeRetry, func(c *schema.Call) {
				c.CallID, c.Operation.Key = "d-2", "op-2"
				c.Operation.Retry.PriorCallID, c.Operation.Retry.PriorSeq = "d-1", 5
			})}), "d-2", nil, recovery.ErrBadSignature, []string{`"d-2"`, "seq 7", "does not verify"}},
		{"a retry's link replayed down the chain", cat(idem, []schema.Event{safeRetry, resultEv("c-2", schema.StatusFailed, ""),
			link(with(safeRetry, func(c *schema.Call) { c.CallID = "c-3" }), func(l *schema.RetryLink) { l.PriorCallID, l.PriorSeq = "c-2", 4 })}),
			"c-3", nil, recovery.ErrBadSignature, []string{`"c-3"`, "seq 6"}},
		{"basis changed in the log", cat(idem, []schema.Event{link(safeRetry, func(l *schema.RetryLink) { l.Basis = schema.BasisNotStarted })}), "c-2", nil, recovery.ErrBadSignature, nil},
		{"issued_at changed in the log", cat(idem, []schema.Event{link(safeRetry, func(l *schema.RetryLink) { l.IssuedAt = l.IssuedAt.Add(1) })}), "c-2", nil, recovery.ErrBadSignature, nil},
		{"plan id changed in the log", cat(idem, []schema.Event{link(safeRetry, func(l *schema.RetryLink) { l.PlanID = "p-x" })}), "c-2", nil, recovery.ErrBadSignature, nil},
		{"review swapped in the log", cat(nonIdem, []schema.Event{link(reviewedRetry, func(l *schema.RetryLink) {
			r := *trustedReview
			r.Evidence = "ticket-999"
			l.Review = signReview(t, k.reviewer, r)
		})}), "c-2", nil, recovery.ErrBadSignature, nil},
		{"review dropped in the log", cat(nonIdem, []schema.Event{link(reviewedRetry, func(l *schema.RetryLink) { l.Review = nil })}), "c-2", nil, recovery.ErrBadSignature, nil},

		// signed by the planner, but the plan does not authorize this retry
		{"plan id of another call", cat(idem, []schema.Event{func() schema.Event {
			p := safe
			p.PlanID = recovery.PlanID(testSession, "c-9")
			return runtimeRetry(signPlan(t, k.planner, p), "c-2", nil)
		}()}), "c-2", nil, recovery.ErrWrongPlanID, []string{`"c-2"`, "seq 4", "p-"}},
		{"reviewed, review unsigned", cat(nonIdem, []schema.Event{reviewedWith(review(schema.VerdictNotExecuted))}), "c-2", nil, recovery.ErrUnsignedReview, []string{"seq 4", "review"}},
		{"reviewed, review by an outsider", cat(nonIdem, []schema.Event{reviewedWith(signReview(t, k.outsider, *review(schema.VerdictNotExecuted)))}), "c-2", nil, recovery.ErrUntrustedSigner, []string{"seq 4", "review"}},
		{"reviewed, review by the planner key", cat(nonIdem, []schema.Event{reviewedWith(signReview(t, k.planner, *review(schema.VerdictNotExecuted)))}), "c-2", nil, recovery.ErrUntrustedSigner, []string{"review"}},
		{"reviewed, verdict uncertain", cat(nonIdem, []schema.Event{reviewedWith(signReview(t, k.reviewer, *review(schema.VerdictUncertain)))}), "c-2", nil, recovery.ErrReviewBasis, []string{"seq 4", "uncertain"}},
		{"reviewed, verdict completed", cat(nonIdem, []schema.Event{reviewedWith(signReview(t, k.reviewer, *review(schema.VerdictCompleted)))}), "c-2", nil, recovery.ErrReviewBasis, []string{"completed"}},
		{"reviewed, review of another call", cat(nonIdem, []schema.Event{reviewedWith(func() *schema.Review {
			r := review(schema.VerdictNotExecuted)
			r.CallID = "c-9"
			return signReview(t, k.reviewer, *r)
		}())}), "c-2", nil, recovery.ErrReviewBasis, []string{`"c-9"`}},
		{"reviewed, review of another session", cat(nonIdem, []schema.Event{reviewedWith(func() *schema.Review {
			r := review(schema.VerdictNotExecuted)
			r.Session = "s-2"
			return signReview(t, k.reviewer, *r)
		}())}), "c-2", nil, recovery.ErrReviewBasis, []string{`"s-2"`}},
		{"reviewed, no review", cat(nonIdem, []schema.Event{reviewedWith(nil)}), "c-2", nil, recovery.ErrReviewBasis, []string{"without a review"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			planners := k.planners
			if tc.planners != nil {
				planners = tc.planners
			}
			for _, src := range []struct {
				name string
				h    func() schema.History
			}{
				{"in memory", func() schema.History { return hist(tc.events...) }},
				{"read", func() schema.History { return reader(jsonl(t, tc.events...)) }},
			} {
				// the history itself is sound: only the retries' authority is in question
				if _, err := recovery.Inspect(src.h(), tc.target); err != nil {
					t.Fatalf("%s: Inspect: %v", src.name, err)
				}
				err := recovery.VerifyRetries(src.h(), planners, k.reviewers)
				withOpt, errOpt := recovery.PrepareRetry(src.h(), tc.target, trustedReview, recovery.RequireSignedPlans(planners, k.reviewers), recovery.WithClock(planClock))
				if tc.is == nil {
					if err != nil {
						t.Fatalf("%s: VerifyRetries: %v", src.name, err)
					}
					without, errNo := recovery.PrepareRetry(src.h(), tc.target, trustedReview, recovery.WithClock(planClock))
					if !reflect.DeepEqual(withOpt, without) || schema.CodeOf(errOpt) != schema.CodeOf(errNo) {
						t.Errorf("%s: with RequireSignedPlans %+v %v; without %+v %v", src.name, withOpt, errOpt, without, errNo)
					}
					continue
				}
				checkUnauthorized(t, src.name+": VerifyRetries", err, tc.is, tc.msg...)
				checkUnauthorized(t, src.name+": PrepareRetry", errOpt, tc.is, tc.msg...)
				if err.Error() != errOpt.Error() {
					t.Errorf("%s: VerifyRetries and PrepareRetry disagree:\n%v\n%v", src.name, err, errOpt)
				}
			}
		})
	}
}

// TestRequireSignedPlansChainOnly: PrepareRetry checks the chain of the
// call it plans, not the rest of the log; VerifyRetries checks every retry.
func TestRequireSignedPlansChainOnly(t *testing.T) {
	k := newKeys(t)
	idem := []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, "")}
	signed := runtimeRetry(signPlan(t, k.planner, prepared(t, idem, "c-1", nil)), "c-2", nil)
	d1 := with(callEv("d-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Key = "op-2" })
	d2 := with(retryEv("d-2", effect.Idempotent, "d-1", 6), func(c *schema.Call) { c.Operation.Key = "op-2" })
	evs := cat(idem, []schema.Event{signed, resultEv("c-2", schema.StatusFailed, ""), d1, resultEv("d-1", schema.StatusFailed, ""), d2})
	opt := recovery.RequireSignedPlans(k.planners, k.reviewers)
	if p, err := recovery.PrepareRetry(hist(evs...), "c-2", nil, opt); err != nil || p.PriorCallID != "c-2" {
		t.Errorf("PrepareRetry(c-2): %+v %v", p, err)
	}
	if _, err := recovery.PrepareRetry(hist(evs...), "d-2", nil, opt); !errors.Is(err, recovery.ErrUnsignedPlan) {
		t.Errorf("PrepareRetry(d-2): %v", err)
	}
	checkUnauthorized(t, "VerifyRetries", recovery.VerifyRetries(hist(evs...), k.planners, k.reviewers), recovery.ErrUnsignedPlan, `"d-2"`, "seq 8")
	// a first attempt has nothing to check
	if _, err := recovery.PrepareRetry(hist(idem...), "c-1", nil, opt); err != nil {
		t.Errorf("first attempt: %v", err)
	}
	if err := recovery.VerifyRetries(nil, nil, nil); err != nil {
		t.Errorf("VerifyRetries(nil): %v", err)
	}
}

// TestRequireSignedPlansOrder: history errors come first, then the
// authority of the chain, then the review and the decision.
func TestRequireSignedPlansOrder(t *testing.T) {
	k := newKeys(t)
	opt := recovery.RequireSignedPlans(k.planners, k.reviewers)
	forged := []schema.Event{
		callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusTimeout, ""),
		retryEv("c-2", effect.NonIdempotent, "c-1", 1),
	}
	// without the option the forged call that never started gets a plan
	if p, err := recovery.PrepareRetry(hist(forged...), "c-2", nil); err != nil || p.Basis != schema.BasisNotStarted {
		t.Fatalf("without RequireSignedPlans: %+v %v", p, err)
	}
	for _, tc := range []struct {
		name   string
		events []schema.Event
		review *schema.Review
		code   schema.Code
	}{
		{"forged, never started", forged, nil, schema.CodeUnauthorizedRetry},
		{"forged, then completed", append(forged[:4:4], resultEv("c-2", schema.StatusOK, "")), nil, schema.CodeUnauthorizedRetry},
		{"forged, with a completed review", forged, review(schema.VerdictCompleted), schema.CodeUnauthorizedRetry},
		{"forged, with a review of another call", forged, review(schema.VerdictNotExecuted), schema.CodeUnauthorizedRetry},
		{"forged, in a corrupt history", append(forged[:4:4], startedEv("c-9")), nil, schema.CodeCorruptHistory},
		{"forged, superseded", append(forged[:4:4], resultEv("c-2", schema.StatusFailed, ""), retryEv("c-3", effect.NonIdempotent, "c-2", 4)), nil, schema.CodeSupersededCall},
		{"forged, after a fence", append(forged[:4:4], fencedEv(), resultEv("c-2", schema.StatusFailed, "")), nil, schema.CodeCorruptHistory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := recovery.PrepareRetry(hist(tc.events...), "c-2", tc.review, opt); schema.CodeOf(err) != tc.code {
				t.Errorf("got %v, want %s", err, tc.code)
			}
		})
	}
}

// TestReaderErrorsReachVerifyRetries: a line the reader refuses is its
// coded error, not a pass.
func TestReaderErrorsReachVerifyRetries(t *testing.T) {
	k := newKeys(t)
	bad := string(jsonl(t, callEv("c-1", effect.Idempotent, true))) + "{\"v\":1,\n"
	if err := recovery.VerifyRetries(reader([]byte(bad)), k.planners, k.reviewers); schema.CodeOf(err) != schema.CodeCorruptHistory {
		t.Errorf("VerifyRetries: %v", err)
	}
	boom := errors.New("disk on fire")
	h := func(yield func(schema.Event, error) bool) { yield(schema.Event{}, boom) }
	if err := recovery.VerifyRetries(h, k.planners, k.reviewers); !errors.Is(err, boom) || schema.CodeOf(err) != "" {
		t.Errorf("VerifyRetries with a failing source: %v", err)
	}
}
