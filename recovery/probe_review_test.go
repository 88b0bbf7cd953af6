package recovery_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// probeReview is an automated review of c-1 by the ledger probe.
func probeReview(v schema.Verdict) schema.Review {
	r := *review(v)
	r.Operator, r.Probe, r.Evidence = "prober", "payments.ledger_lookup", "ledger fence raised to epoch 2; no charge of c-1"
	return r
}

// TestFoldProbeBelowPerson: a probe's uncertain is evidence only, a probe's
// not_executed never overrules a person's standing review, a person's
// completed overrules a probe's not_executed, and nothing overrules a
// completed (a probe's included).
func TestFoldProbeBelowPerson(t *testing.T) {
	const (
		ne = schema.VerdictNotExecuted
		co = schema.VerdictCompleted
		un = schema.VerdictUncertain
	)
	type entry struct {
		v     schema.Verdict
		probe bool
	}
	tests := []struct {
		name    string
		entries []entry
		decides int
		final   bool
		codes   []string
	}{
		{"probe completed is final", []entry{{co, true}}, 0, true, []string{""}},
		{"probe not_executed decides", []entry{{ne, true}}, 0, false, []string{""}},
		{"probe uncertain is evidence only", []entry{{un, true}}, -1, false, []string{""}},
		{"probe uncertain does not take a person's not_executed away", []entry{{ne, false}, {un, true}}, 0, false, []string{"", ""}},
		{"person completed overrules probe not_executed", []entry{{ne, true}, {co, false}}, 1, true, []string{"", ""}},
		{"probe not_executed after person completed", []entry{{co, false}, {ne, true}}, 0, true, []string{"", "review_conflict"}},
		{"probe not_executed after person uncertain", []entry{{un, false}, {ne, true}}, 0, false, []string{"", "review_conflict"}},
		{"probe not_executed after person not_executed", []entry{{ne, false}, {ne, true}}, 0, false, []string{"", "review_conflict"}},
		{"person not_executed after probe completed", []entry{{co, true}, {ne, false}}, 0, true, []string{"", "review_conflict"}},
		{"person uncertain after probe not_executed holds it", []entry{{ne, true}, {un, false}}, 1, false, []string{"", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var es []recovery.ReviewEntry
			for i, e := range tc.entries {
				r := *review(e.v)
				if e.probe {
					r = probeReview(e.v)
				}
				es = append(es, recovery.ReviewEntry{Review: r, Seq: uint64(10 + i)})
			}
			f := recovery.FoldReviews(testSession, "c-1", es)
			if f.Decides != tc.decides || f.Final != tc.final {
				t.Fatalf("decides %d final %v, want %d %v (rejected %v)", f.Decides, f.Final, tc.decides, tc.final, f.Rejected)
			}
			for i, want := range tc.codes {
				if got := string(schema.CodeOf(f.Rejected[i])); got != want {
					t.Errorf("entry %d: code %q, want %q (%v)", i, got, want, f.Rejected[i])
				}
			}
		})
	}
}

// TestVerifyReviewByProvenance: an automated review verifies only against
// the prober keys and a person's only against the reviewer keys; the probe
// name is signed, so taking it off (or putting it on) breaks the signature.
func TestVerifyReviewByProvenance(t *testing.T) {
	person, _ := nkeys.CreateUser()
	prober, _ := nkeys.CreateUser()
	pp, _ := person.PublicKey()
	pr, _ := prober.PublicKey()
	reviewers, _ := recovery.NewTrustedKeys(pp)
	probers, _ := recovery.NewTrustedKeys(pr)

	auto, err := recovery.SignReview(prober, probeReview(schema.VerdictNotExecuted))
	if err != nil {
		t.Fatal(err)
	}
	if err := recovery.VerifyReviewBy(auto, reviewers, probers); err != nil {
		t.Fatalf("probe's review by a trusted prober key: %v", err)
	}
	if err := recovery.VerifyReviewBy(auto, probers, nil); !errors.Is(err, recovery.ErrUntrustedSigner) {
		t.Fatalf("probe's review with no prober trusted (its key trusted as a reviewer's): %v, want untrusted signer", err)
	}
	// A prober key signing a person's review: untrusted.
	forged, _ := recovery.SignReview(prober, *review(schema.VerdictNotExecuted))
	if err := recovery.VerifyReviewBy(forged, reviewers, probers); !errors.Is(err, recovery.ErrUntrustedSigner) {
		t.Fatalf("person's review signed by a prober key: %v, want untrusted signer", err)
	}
	// A reviewer key signing an automated review: untrusted.
	posing, _ := recovery.SignReview(person, probeReview(schema.VerdictNotExecuted))
	if err := recovery.VerifyReviewBy(posing, reviewers, probers); !errors.Is(err, recovery.ErrUntrustedSigner) {
		t.Fatalf("automated review signed by a reviewer key: %v, want untrusted signer", err)
	}
	// The probe name is in the signed bytes.
	stripped := auto
	stripped.Probe = ""
	if err := recovery.VerifyReviewBy(stripped, probers, probers); !errors.Is(err, recovery.ErrBadSignature) {
		t.Fatalf("probe name removed after signing: %v, want bad signature", err)
	}
	renamed := auto
	renamed.Probe = "other.probe"
	if err := recovery.VerifyReviewBy(renamed, reviewers, probers); !errors.Is(err, recovery.ErrBadSignature) {
		t.Fatalf("probe renamed after signing: %v, want bad signature", err)
	}
	// A forged key: untrusted.
	other, _ := nkeys.CreateUser()
	f2, _ := recovery.SignReview(other, probeReview(schema.VerdictNotExecuted))
	if err := recovery.VerifyReviewBy(f2, reviewers, probers); !errors.Is(err, recovery.ErrUntrustedSigner) {
		t.Fatalf("automated review by an untrusted key: %v", err)
	}
}

// TestPrepareRetryOnProbeReview: a signed not_executed by a trusted probe
// lifts needs_review only with TrustProbers; the plan carries the review
// with its probe, and the retry it becomes verifies with VerifyRetriesBy.
func TestPrepareRetryOnProbeReview(t *testing.T) {
	prober, _ := nkeys.CreateUser()
	pr, _ := prober.PublicKey()
	probers, _ := recovery.NewTrustedKeys(pr)
	rv, _ := recovery.SignReview(prober, probeReview(schema.VerdictNotExecuted))
	h := func() schema.History {
		return hist(callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), fencedEv())
	}
	if _, err := recovery.PrepareRetry(h(), "c-1", &rv, recovery.RequireSignedReview(nil)); schema.CodeOf(err) != schema.CodeInvalidReview {
		t.Fatalf("without trusted probers: %v, want invalid_review", err)
	}
	p, err := recovery.PrepareRetry(h(), "c-1", &rv, recovery.RequireSignedReview(nil), recovery.TrustProbers(probers))
	if err != nil {
		t.Fatalf("with the prober trusted: %v", err)
	}
	if p.Basis != schema.BasisReviewedNotExecuted || p.Review == nil || p.Review.Probe != "payments.ledger_lookup" {
		t.Fatalf("plan %+v", p)
	}
}

// TestVerifyRetriesOnProbeReview: a retry planned on a probe's signed
// not_executed verifies with VerifyRetriesBy when the prober's key is
// trusted as a prober's, and is unauthorized_retry when it is not, or
// when the prober's key is only trusted as a reviewer's.
func TestVerifyRetriesOnProbeReview(t *testing.T) {
	k := newKeys(t)
	proberKP, _ := nkeys.CreateUser()
	probers := mustTrust(t, pub(t, proberKP))
	nonIdem := []schema.Event{callEv("c-1", effect.NonIdempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusTimeout, "")}
	rv, err := recovery.SignReview(proberKP, probeReview(schema.VerdictNotExecuted))
	if err != nil {
		t.Fatal(err)
	}
	p, err := recovery.PrepareRetry(hist(nonIdem...), "c-1", &rv, recovery.RequireSignedReview(k.reviewers), recovery.TrustProbers(probers), recovery.WithClock(planClock))
	if err != nil {
		t.Fatal(err)
	}
	h := cat(nonIdem, []schema.Event{runtimeRetry(signPlan(t, k.planner, p), "c-2", nil)})
	if err := recovery.VerifyRetriesBy(hist(h...), k.planners, k.reviewers, probers); err != nil {
		t.Fatalf("retry on a trusted probe's review: %v", err)
	}
	if err := recovery.VerifyRetries(hist(h...), k.planners, k.reviewers); schema.CodeOf(err) != schema.CodeUnauthorizedRetry {
		t.Fatalf("no prober trusted: %v, want unauthorized_retry", err)
	}
	if err := recovery.VerifyRetriesBy(hist(h...), k.planners, probers, nil); schema.CodeOf(err) != schema.CodeUnauthorizedRetry {
		t.Fatalf("the prober's key trusted as a reviewer's only: %v, want unauthorized_retry", err)
	}
}
