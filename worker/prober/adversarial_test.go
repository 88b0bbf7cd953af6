package prober_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/prober"
	"github.com/jingwei/jingwei/worker/service"
)

// withProbe replaces the payments probe in the prober's registry.
func withProbe(e *env, probe worker.Tool) func(*prober.Config) {
	return func(c *prober.Config) {
		reg, err := worker.NewRegistry(e.tl.PaymentsChargeTool(), probe)
		if err != nil {
			e.t.Fatal(err)
		}
		c.Tools = reg
	}
}

// settledOrHeld waits until the recovery worker has the call assessed and
// the prober had time to act, then returns the reviews on record.
func (e *env) reviewsAfter(callID string, d time.Duration) []service.ReviewCheck {
	time.Sleep(d)
	cs, err := e.rec.Reviews(e.ctx, session, callID)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func (e *env) publish(rv schema.Review) {
	b, _ := json.Marshal(rv)
	if _, err := e.topo.JS.Publish(e.ctx, e.topo.Names().ReviewsSubject(session), b); err != nil {
		e.t.Fatal(err)
	}
}

// TestProbeNotAuthoritativeIsEvidenceOnly: a probe whose not_found is not
// authoritative publishes evidence (an automated uncertain) and the call
// still needs a person: prepare keeps needs_review.
func TestProbeNotAuthoritativeIsEvidenceOnly(t *testing.T) {
	e := setup(t)
	probe := e.tl.PaymentsLookupTool()
	probe.Metadata.AuthoritativeNotFound = false
	e.startProber(withProbe(e, probe))
	callID, resume := e.frozenCharge(false)
	defer func() { _ = resume() }()
	c := e.deciding(callID, "the probe's evidence is on record", func(c service.ReviewCheck) bool { return c.Review.Probe != "" })
	if c.Review.Verdict != schema.VerdictUncertain || c.Decides {
		t.Fatalf("non-authoritative probe's review %+v (decides %v): want an uncertain that decides nothing", c.Review, c.Decides)
	}
	if _, err := e.rec.Prepare(e.ctx, session, callID); schema.CodeOf(err) != schema.CodeNeedsReview {
		t.Fatalf("prepare: %v, want needs_review", err)
	}
}

// TestProbeHangingOrFailingChangesNothing: a probe that hangs past its
// timeout, or fails, on every attempt publishes nothing; the call still
// needs review and nothing was charged.
func TestProbeHangingOrFailingChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		body worker.Body
	}{
		{"hangs", func(ctx context.Context, _ worker.BodyRequest) (json.RawMessage, error) {
			select {} // ignores its context: abandoned, not waited for
		}},
		{"fails", func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return nil, context.DeadlineExceeded
		}},
		{"answers nonsense", func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
			return json.RawMessage(`{"answer":"probably"}`), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			probe := e.tl.PaymentsLookupTool()
			probe.Body = tc.body
			failed := make(chan prober.Outcome, 1)
			e.startProber(func(c *prober.Config) {
				withProbe(e, probe)(c)
				c.Timeout, c.Attempts = 300*time.Millisecond, 2
				c.Observe = func(o prober.Outcome) { failed <- o }
			})
			callID, resume := e.frozenCharge(false)
			defer func() { _ = resume() }()
			select {
			case o := <-failed:
				if o.Kind != prober.Failed || o.CallID != callID {
					t.Fatalf("outcome %+v, want failed for %s", o, callID)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the prober never gave up")
			}
			if cs := e.reviewsAfter(callID, 300*time.Millisecond); len(cs) != 0 {
				t.Fatalf("reviews after a failing probe: %+v", cs)
			}
			if _, err := e.rec.Prepare(e.ctx, session, callID); schema.CodeOf(err) != schema.CodeNeedsReview {
				t.Fatalf("prepare: %v, want needs_review", err)
			}
		})
	}
}

// TestForgedAndOverruledAutomatedReviews: a forged automated review signed
// by an untrusted key, and a person's review signed by the prober's key,
// are rejected; a person's completed after the probe's not_executed wins
// and is final; the probe's not_executed published again after it is
// refused.
func TestForgedAndOverruledAutomatedReviews(t *testing.T) {
	e := setup(t)
	e.startProber(nil)
	callID, resume := e.frozenCharge(false)
	defer func() { _ = resume() }()
	probeRv := e.deciding(callID, "the probe's not_executed is accepted", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Verdict == schema.VerdictNotExecuted
	}).Review

	forger, _ := nkeys.CreateUser()
	base := schema.Review{V: 1, Session: session, CallID: callID, Operator: "prober", Evidence: "forged", Verdict: schema.VerdictCompleted, Probe: tools.PaymentsLookup}
	forged, _ := recovery.SignReview(forger, base)
	e.publish(forged)
	person := base
	person.Probe, person.Operator = "", "mallory"
	posing, _ := recovery.SignReview(e.proberKP, person)
	e.publish(posing)
	for _, rv := range []schema.Review{forged, posing} {
		streamtestRejected(t, e, callID, rv.Sig)
	}
	if _, err := e.rec.Prepare(e.ctx, session, callID); err != nil {
		t.Fatalf("prepare after forged reviews: %v (the probe's not_executed must still decide)", err)
	}

	alice := base
	alice.Probe, alice.Operator, alice.Evidence = "", "alice@ops", "bank statement shows the charge"
	alice, _ = recovery.SignReview(e.person, alice)
	e.publish(alice)
	e.deciding(callID, "the person's completed decides", func(c service.ReviewCheck) bool {
		return c.Decides && c.Review.Operator == "alice@ops"
	})
	e.publish(probeRv) // the probe's not_executed again: refused
	e.publish(func() schema.Review {
		r := probeRv
		r.At, r.Sig = time.Now().UTC().Add(time.Second).Format(time.RFC3339), ""
		r, _ = recovery.SignReview(e.proberKP, r)
		return r
	}())
	streamtestEventuallyConflicts(t, e, callID, 1)
	if _, err := e.rec.Prepare(e.ctx, session, callID); schema.CodeOf(err) != schema.CodeCompleted {
		t.Fatalf("prepare after the person's completed: %v, want completed", err)
	}
}

// streamtestRejected waits for the review with sig to be on record,
// rejected as invalid_review.
func streamtestRejected(t *testing.T, e *env, callID, sig string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cs, _ := e.rec.Reviews(e.ctx, session, callID)
		for _, c := range cs {
			if c.Review.Sig == sig {
				if c.Accepted || c.Code != string(schema.CodeInvalidReview) {
					t.Fatalf("review %+v: accepted %v code %q, want rejected invalid_review", c.Review, c.Accepted, c.Code)
				}
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("review %s never on record", sig[:8])
}

// streamtestEventuallyConflicts waits for n or more review_conflict
// rejections of the probe's reviews.
func streamtestEventuallyConflicts(t *testing.T, e *env, callID string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cs, _ := e.rec.Reviews(e.ctx, session, callID)
		k := 0
		for _, c := range cs {
			if c.Review.Probe != "" && c.Code == string(schema.CodeReviewConflict) {
				k++
			}
		}
		if k >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no review_conflict for the probe's not_executed after a person's completed")
}
