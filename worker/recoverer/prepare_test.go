package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestPrepareWithReviews: only a trusted, signed review for the session's own
// call lifts needs_review; forged ones change nothing; completed blocks.
func TestPrepareWithReviews(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	w := e.writer("s-p", "w1")
	for _, id := range []string{"pay-ok", "pay-forged", "pay-done"} {
		w.call(id, "payments.charge", effect.NonIdempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusTimeout, "")
	}
	other := e.writer("s-other", "w1")
	other.call("pay-forged", "payments.charge", effect.NonIdempotent, "k-o")
	other.result("pay-forged", schema.StatusFailed, "")

	// No review: needs_review.
	if _, err := r.Prepare(ctx, "s-p", "pay-ok"); !errors.Is(err, schema.ErrNeedsReview) {
		t.Fatalf("prepare without review: %v, want needs_review", err)
	}

	stranger, _ := nkeys.CreateUser()
	tampered := review(t, e.reviewer, "s-p", "pay-forged", schema.VerdictNotExecuted)
	tampered.Evidence = "ticket-forged"
	unsigned := review(t, e.reviewer, "s-p", "pay-forged", schema.VerdictNotExecuted)
	unsigned.Sig, unsigned.Signer = "", ""
	forged := []struct {
		name    string
		subject string
		body    any
	}{
		{"unknown key", "s-p", review(t, stranger, "s-p", "pay-forged", schema.VerdictNotExecuted)},
		{"bad signature", "s-p", tampered},
		{"unsigned", "s-p", unsigned},
		{"other session on this subject", "s-p", review(t, e.reviewer, "s-other", "pay-forged", schema.VerdictNotExecuted)},
		{"malformed", "s-p", []byte(`{"v":1,"session":"s-p","call_id":"pay-forged","call_id":"x"}`)},
	}
	for _, f := range forged {
		e.publishReview(f.subject, f.body)
		t.Run(f.name, func(t *testing.T) {
			if _, err := r.Prepare(ctx, "s-p", "pay-forged"); !errors.Is(err, schema.ErrNeedsReview) {
				t.Fatalf("prepare after a forged review: %v, want needs_review", err)
			}
			if _, err := r.reviews.check(f.subject, mustJSON(t, f.body)); schema.CodeOf(err) != schema.CodeInvalidReview {
				t.Fatalf("checkReview: %v, want invalid_review", err)
			}
		})
	}
	// The valid review of s-other's pay-forged does not apply to s-p's.
	e.publishReview("s-other", review(t, e.reviewer, "s-other", "pay-forged", schema.VerdictNotExecuted))
	if _, err := r.Prepare(ctx, "s-p", "pay-forged"); !errors.Is(err, schema.ErrNeedsReview) {
		t.Fatalf("prepare after another session's review: %v, want needs_review", err)
	}
	// An uncertain verdict does not lift needs_review.
	e.publishReview("s-p", review(t, e.reviewer, "s-p", "pay-ok", schema.VerdictUncertain))
	if _, err := r.Prepare(ctx, "s-p", "pay-ok"); !errors.Is(err, schema.ErrNeedsReview) {
		t.Fatalf("prepare after uncertain review: %v, want needs_review", err)
	}

	// A trusted not_executed review: a plan on that basis, published once.
	good := review(t, e.reviewer, "s-p", "pay-ok", schema.VerdictNotExecuted)
	e.publishReview("s-p", good)
	if _, err := r.reviews.accept(ctx, "s-p", 0, mustJSON(t, good)); err != nil {
		t.Fatalf("acceptReview: %v", err)
	}
	p, err := r.Prepare(ctx, "s-p", "pay-ok")
	if err != nil {
		t.Fatal(err)
	}
	if p.Basis != schema.BasisReviewedNotExecuted || p.Review == nil || p.Review.Sig != good.Sig || p.Key != "k-pay-ok" || p.PriorCallID != "pay-ok" {
		t.Fatalf("plan %+v", p)
	}
	again, err := r.Prepare(ctx, "s-p", "pay-ok")
	if err != nil || again.PlanID != p.PlanID || !again.IssuedAt.Equal(p.IssuedAt) {
		t.Fatalf("prepare again: %+v %v, want the stored plan", again, err)
	}
	if msgs := e.planMsgs(); msgs[p.PlanID] != 1 || len(msgs) != 1 {
		t.Fatalf("JW_PLANS %v, want one message for %s", msgs, p.PlanID)
	}
	if rec, err := stream.NewPlans(e.topo.PlanBucket).Get(ctx, p.PlanID); err != nil || rec.State != stream.PlanIssued {
		t.Fatalf("jw_plans record %+v %v", rec, err)
	}

	// completed refuses, even after a not_executed review came first.
	e.publishReview("s-p", review(t, e.reviewer, "s-p", "pay-done", schema.VerdictNotExecuted))
	e.publishReview("s-p", review(t, e.reviewer, "s-p", "pay-done", schema.VerdictCompleted))
	if _, err := r.Prepare(ctx, "s-p", "pay-done"); !errors.Is(err, schema.ErrCompleted) {
		t.Fatalf("prepare after completed review: %v, want completed", err)
	}
	// A review of a call that is not in the log is rejected.
	if _, err := r.reviews.accept(ctx, "s-p", 0, mustJSON(t, review(t, e.reviewer, "s-p", "nope", schema.VerdictNotExecuted))); !errors.Is(err, schema.ErrUnknownCall) {
		t.Fatalf("review of an unknown call: %v, want unknown_call", err)
	}

	// Reviews reports each review of a call as prepare judged it: the
	// forged ones (all but the malformed one, which names no call it can
	// be attributed to) are listed as rejected with their reason.
	checks, err := r.Reviews(ctx, "s-p", "pay-forged")
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 4 {
		t.Fatalf("Reviews(pay-forged) = %d checks, want the 4 attributable forged reviews: %+v", len(checks), checks)
	}
	for i, c := range checks {
		if c.Accepted || c.Code != string(schema.CodeInvalidReview) || c.Reason == "" || c.Seq == 0 {
			t.Errorf("check %d (%s) = %+v, want rejected invalid_review with a reason and a seq", i, forged[i].name, c)
		}
		if i > 0 && c.Seq <= checks[i-1].Seq {
			t.Errorf("checks out of stream order: %d after %d", c.Seq, checks[i-1].Seq)
		}
	}
	done, err := r.Reviews(ctx, "s-p", "pay-done")
	if err != nil || len(done) != 2 || !done[0].Accepted || !done[1].Accepted || done[1].Review.Verdict != schema.VerdictCompleted {
		t.Fatalf("Reviews(pay-done) = %+v, %v, want two accepted, the latest completed", done, err)
	}
	if none, err := r.Reviews(ctx, "s-quiet", "c-1"); err != nil || len(none) != 0 {
		t.Fatalf("Reviews of a session without reviews = %+v, %v", none, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	if b, ok := v.([]byte); ok {
		return b
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrepareConfirmation: an open call under a live lease is refused
// not_confirmed; once the lease is gone prepare takes the session over and
// plans from the confirmed history.
func TestPrepareConfirmation(t *testing.T) {
	ctx := context.Background()
	e := setup(t, time.Second)
	r := e.recoverer("a")
	w := e.writer("s-c", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	if _, err := r.Prepare(ctx, "s-c", "c-1"); !errors.Is(err, schema.ErrNotConfirmed) {
		t.Fatalf("prepare of an open call under a live lease: %v, want not_confirmed", err)
	}
	if err := w.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := r.Prepare(ctx, "s-c", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Basis != schema.BasisNotStarted {
		t.Fatalf("plan basis %s, want not_started", p.Basis)
	}
	if _, err := w.lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}}); !errors.Is(err, stream.ErrFenced) {
		t.Fatalf("old writer after prepare's takeover: %v, want ErrFenced", err)
	}
	for _, tc := range []struct {
		session, call string
		code          schema.Code
	}{
		{"s-c", "missing", schema.CodeUnknownCall},
		{"bad session!", "c-1", schema.CodeBadRequest},
		{"s-c", "", schema.CodeBadRequest},
	} {
		if _, err := r.Prepare(ctx, tc.session, tc.call); schema.CodeOf(err) != tc.code {
			t.Errorf("prepare %q/%q: %v, want %s", tc.session, tc.call, err, tc.code)
		}
	}
}

// TestThreeRecoverersRacing: three recoverers prepare the same uncertain
// calls at once; exactly one plan per call is stored and published.
func TestThreeRecoverersRacing(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	rs := []*Recoverer{e.recoverer("r1"), e.recoverer("r2"), e.recoverer("r3")}
	for _, r := range rs {
		e.run(r)
	}
	w := e.writer("s-race", "w1")
	const calls = 6
	for i := range calls {
		id := fmt.Sprintf("c-%d", i)
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusFailed, "")
	}
	type res struct {
		call string
		plan schema.Plan
		err  error
	}
	out := make(chan res, calls*len(rs)*2)
	var wg sync.WaitGroup
	for round := 0; round < 2; round++ {
		for _, r := range rs {
			for i := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("c-%d", i)
					p, err := r.Prepare(ctx, "s-race", id)
					out <- res{id, p, err}
				}()
			}
		}
	}
	wg.Wait()
	close(out)
	ids := map[string]string{}
	for x := range out {
		if x.err != nil {
			t.Fatalf("prepare %s: %v", x.call, x.err)
		}
		if prev, ok := ids[x.call]; ok && prev != x.plan.PlanID {
			t.Fatalf("call %s got plans %s and %s", x.call, prev, x.plan.PlanID)
		}
		ids[x.call] = x.plan.PlanID
	}
	keys, err := e.topo.PlanBucket.Keys(ctx)
	if err != nil || len(keys) != calls {
		t.Fatalf("jw_plans keys %v %v, want %d", keys, err, calls)
	}
	msgs := e.planMsgs()
	if len(msgs) != calls {
		t.Fatalf("JW_PLANS holds %d plans, want %d: %v", len(msgs), calls, msgs)
	}
	for call, id := range ids {
		if msgs[id] != 1 {
			t.Fatalf("plan %s of %s published %d times", id, call, msgs[id])
		}
	}
}

// TestCrashBetweenCreateAndPublish: a recoverer "crashes" after the plan's
// KV create; the next start publishes it, exactly once.
func TestCrashBetweenCreateAndPublish(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	w := e.writer("s-k", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusTimeout, "")

	crashing := e.recoverer("a")
	crashing.issuer.afterCreate = func(schema.Plan) error { return errCrash }
	if _, err := crashing.Prepare(ctx, "s-k", "c-1"); !errors.Is(err, errCrash) {
		t.Fatalf("prepare with the crash hook: %v", err)
	}
	keys, err := e.topo.PlanBucket.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("jw_plans %v %v, want the created plan", keys, err)
	}
	if msgs := e.planMsgs(); len(msgs) != 0 {
		t.Fatalf("JW_PLANS %v before the restart, want nothing", msgs)
	}

	for restart := 0; restart < 2; restart++ {
		stop := e.run(e.recoverer("a"))
		streamtest.Eventually(t, 5*time.Second, "plan published", func() bool { return e.planMsgs()[keys[0]] >= 1 })
		stop()
	}
	r := e.recoverer("a")
	p, err := r.Prepare(ctx, "s-k", "c-1")
	if err != nil || p.PlanID != keys[0] {
		t.Fatalf("prepare after restart: %+v %v", p, err)
	}
	if msgs := e.planMsgs(); len(msgs) != 1 || msgs[keys[0]] != 1 {
		t.Fatalf("JW_PLANS %v, want plan %s exactly once", msgs, keys[0])
	}
}

// TestAutoPlan: with AutoPlan on, a retry_allowed assessment gets its plan
// without a prepare; needs_review ones do not.
func TestAutoPlan(t *testing.T) {
	e := setup(t, 0)
	as := e.assessments()
	e.run(e.recoverer("a", func(c *Config) { c.AutoPlan = true }))
	w := e.writer("s-auto", "w1")
	w.call("safe", "orders.create", effect.Idempotent, "k-1")
	w.started("safe")
	w.result("safe", schema.StatusFailed, "")
	w.call("unsafe", "payments.charge", effect.NonIdempotent, "k-2")
	w.started("unsafe")
	w.result("unsafe", schema.StatusFailed, "")
	w.call("done", "orders.create", effect.Idempotent, "k-3")
	w.result("done", schema.StatusOK, "")
	// The auto-plan queue is decided before an assessment is published.
	for _, id := range []string{"safe", "unsafe", "done"} {
		as.wait(t, "s-auto", id, 5*time.Second)
	}
	streamtest.Eventually(t, 5*time.Second, "auto plan", func() bool { return len(e.planMsgs()) >= 1 })
	r := e.recoverer("b")
	streamtest.Eventually(t, 5*time.Second, "status", func() bool {
		st, err := r.Status(context.Background(), "s-auto")
		return err == nil && st.Plans.Issued == 1
	})
	msgs := e.planMsgs()
	if len(msgs) != 1 {
		t.Fatalf("plans %v, want one (for the idempotent failure)", msgs)
	}
	rec, err := stream.NewPlans(e.topo.PlanBucket).Get(context.Background(), firstKey(msgs))
	if err != nil || rec.Plan.PriorCallID != "safe" || rec.Plan.Basis != schema.BasisUncertainSafe {
		t.Fatalf("auto plan %+v %v", rec, err)
	}
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// TestPrepareIssuedBefore: a prepare that finds the call's plan issued
// returns it without planning again (it also publishes it when its issuer
// died before publishing), and still refuses after a completed review and
// after the plan was used.
func TestPrepareIssuedBefore(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	w := e.writer("s-ib", "w1")
	for _, id := range []string{"c-1", "c-2"} {
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusTimeout, "")
	}
	crashing := e.recoverer("a")
	crashing.issuer.afterCreate = func(schema.Plan) error { return errCrash }
	if _, err := crashing.Prepare(ctx, "s-ib", "c-1"); !errors.Is(err, errCrash) {
		t.Fatalf("prepare with the crash hook: %v", err)
	}
	stored, err := stream.NewPlans(e.topo.PlanBucket).Get(ctx, recovery.PlanID("s-ib", "c-1"))
	if err != nil {
		t.Fatal(err)
	}
	// Another recoverer (not restarted: no repair ran) finds the plan,
	// returns it unchanged and publishes it, once however often it asks.
	r := e.recoverer("b", func(c *Config) { c.Now = func() time.Time { return time.Unix(0, 0) } })
	for range 3 {
		p, err := r.Prepare(ctx, "s-ib", "c-1")
		if err != nil || p.PlanID != stored.Plan.PlanID || !p.IssuedAt.Equal(stored.Plan.IssuedAt) {
			t.Fatalf("prepare of an issued plan: %+v %v, want the stored plan %+v", p, err, stored.Plan)
		}
	}
	if msgs := e.planMsgs(); len(msgs) != 1 || msgs[stored.Plan.PlanID] != 1 {
		t.Fatalf("JW_PLANS %v, want the stored plan once", msgs)
	}

	// A completed review since the plan was issued refuses.
	e.publishReview("s-ib", review(t, e.reviewer, "s-ib", "c-1", schema.VerdictCompleted))
	if _, err := r.Prepare(ctx, "s-ib", "c-1"); !errors.Is(err, schema.ErrCompleted) {
		t.Fatalf("prepare after a completed review: %v, want completed", err)
	}

	// A plan consumed by an attempt that never reached the log is handed
	// out again (for the next owner to complete that attempt once); once
	// the attempt is on the log, the call is superseded.
	p2, err := r.Prepare(ctx, "s-ib", "c-2")
	if err != nil {
		t.Fatal(err)
	}
	plans := stream.NewPlans(e.topo.PlanBucket)
	rec, err := plans.Get(ctx, p2.PlanID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Consume(ctx, rec, "c-3", 1); err != nil {
		t.Fatal(err)
	}
	if again, err := r.Prepare(ctx, "s-ib", "c-2"); err != nil || again.PlanID != p2.PlanID {
		t.Fatalf("prepare of a consumed plan without its attempt: %+v %v, want the plan", again, err)
	}
	w.retry("c-3", "c-2", "orders.create", effect.Idempotent, "k-c-2")
	if _, err := r.Prepare(ctx, "s-ib", "c-2"); !errors.Is(err, schema.ErrSupersededCall) {
		t.Fatalf("prepare once the attempt is on the log: %v, want superseded_call", err)
	}
}

// TestCompletedReviewIsFinal: once a trusted completed review of a call is
// on record, nothing lifts the refusal. A later trusted not_executed
// review, an older not_executed review re-published byte for byte after
// the completed one, and an attempt to delete or purge the completed
// review's message all leave prepare refusing with completed; the later
// reviews are judged review_conflict, and no plan is ever issued.
func TestCompletedReviewIsFinal(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	w := e.writer("s-f", "w1")
	for _, id := range []string{"pay-1", "pay-2"} {
		w.call(id, "payments.charge", effect.NonIdempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusTimeout, "")
	}
	refused := func(call string) {
		t.Helper()
		if _, err := r.Prepare(ctx, "s-f", call); !errors.Is(err, schema.ErrCompleted) {
			t.Fatalf("prepare %s: %v, want completed", call, err)
		}
	}

	// A later trusted not_executed review.
	e.publishReview("s-f", review(t, e.reviewer, "s-f", "pay-1", schema.VerdictCompleted))
	refused("pay-1")
	e.publishReview("s-f", review(t, e.reviewer, "s-f", "pay-1", schema.VerdictNotExecuted))
	refused("pay-1")
	checks, err := r.Reviews(ctx, "s-f", "pay-1")
	if err != nil || len(checks) != 2 {
		t.Fatalf("Reviews = %+v %v", checks, err)
	}
	if !checks[0].Accepted || !checks[0].Decides || checks[1].Accepted || checks[1].Code != string(schema.CodeReviewConflict) {
		t.Fatalf("judgement %+v, want completed deciding and the later review a review_conflict", checks)
	}
	if _, err := r.reviews.accept(ctx, "s-f", checks[1].Seq, mustJSON(t, checks[1].Review)); !errors.Is(err, schema.ErrReviewConflict) {
		t.Fatalf("acceptReview of the later review: %v, want review_conflict", err)
	}

	// An older not_executed review re-published byte for byte.
	older := mustJSON(t, review(t, e.reviewer, "s-f", "pay-2", schema.VerdictNotExecuted))
	if _, err := e.topo.JS.Publish(ctx, e.topo.Names().ReviewsSubject("s-f"), older); err != nil {
		t.Fatal(err)
	}
	e.publishReview("s-f", review(t, e.reviewer, "s-f", "pay-2", schema.VerdictCompleted))
	if _, err := e.topo.JS.Publish(ctx, e.topo.Names().ReviewsSubject("s-f"), older); err != nil {
		t.Fatal(err)
	}
	refused("pay-2")
	checks, _ = r.Reviews(ctx, "s-f", "pay-2")
	if len(checks) != 3 || !checks[0].Accepted || checks[0].Decides || !checks[1].Decides || checks[2].Code != string(schema.CodeReviewConflict) {
		t.Fatalf("judgement %+v, want the re-published review rejected", checks)
	}

	// The completed review cannot be removed from the audit trail.
	if err := e.topo.Reviews.DeleteMsg(ctx, checks[1].Seq); err == nil {
		t.Fatal("the completed review's message was deleted")
	}
	if err := e.topo.Reviews.Purge(ctx, jetstream.WithPurgeSubject(e.topo.Names().ReviewsSubject("s-f"))); err == nil {
		t.Fatal("the reviews were purged")
	}
	refused("pay-2")
	if msgs := e.planMsgs(); len(msgs) != 0 {
		t.Fatalf("plans published: %v", msgs)
	}
}

// TestForgedRetryGetsNoPlan: a retry tool.call appended to a session log
// by anything but jingwei — a plain client with the writer's rights — that
// "never started" makes its chain not_started; prepare still refuses it
// (unauthorized_retry) because its retry link carries no plan signed by a
// trusted planner, and publishes nothing. The same with a plan signed by
// an untrusted key.
func TestForgedRetryGetsNoPlan(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	w := e.writer("s-x", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusFailed, "")
	w.retry("c-2", "c-1", "orders.create", effect.Idempotent, "k-1") // forged, unsigned; never started
	_ = w.lease.Release(ctx)
	if _, err := r.Prepare(ctx, "s-x", "c-2"); !errors.Is(err, schema.ErrUnauthorizedRetry) {
		t.Fatalf("prepare of a forged retry: %v, want unauthorized_retry", err)
	}

	mallory := newPlanner(t)
	w2 := e.writer("s-y", "w1")
	w2.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w2.result("c-1", schema.StatusFailed, "")
	h, err := e.topo.Logs().Load(ctx, "s-y")
	if err != nil {
		t.Fatal(err)
	}
	p, err := recovery.PrepareRetry(schema.Events(h), "c-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = recovery.SignPlan(mallory, p); err != nil {
		t.Fatal(err)
	}
	w2.append(schema.Event{Type: schema.TypeCall, Call: &schema.Call{
		CallID: "c-2", Tool: "orders.create", Arguments: json.RawMessage(`{"n":1}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-1", Contract: p.Contract,
			Retry: &schema.RetryLink{PriorCallID: "c-1", PriorSeq: p.PriorSeq, PlanID: p.PlanID, Basis: p.Basis, IssuedAt: p.IssuedAt, Signer: p.Signer, Sig: p.Sig}},
	}})
	_ = w2.lease.Release(ctx)
	if _, err := r.Prepare(ctx, "s-y", "c-2"); !errors.Is(err, schema.ErrUnauthorizedRetry) {
		t.Fatalf("prepare after a retry signed by an untrusted key: %v, want unauthorized_retry", err)
	}
	if msgs := e.planMsgs(); len(msgs) != 0 {
		t.Fatalf("plans published: %v", msgs)
	}
	// A plan the recoverer issued itself verifies in the history.
	w3 := e.writer("s-z", "w1")
	w3.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w3.result("c-1", schema.StatusFailed, "")
	good, err := r.Prepare(ctx, "s-z", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := recovery.VerifyPlan(good, r.cfg.TrustedPlanners); err != nil {
		t.Fatalf("the recoverer's own plan does not verify: %v", err)
	}
}

// TestPrepareRefusesForeignPlanRecord: a client with write access to
// jw_plans (a tool worker's role, for its compare-and-set consumption)
// stores a record under a call's plan id before any prepare — a plan of
// another call, the right call signed by an unknown key, or a consumed
// record so signed. Prepare answers plan_untrusted naming the record, on
// its first try and its repeats, and publishes nothing: it never hands
// out a plan jingwei did not issue for the call.
func TestPrepareRefusesForeignPlanRecord(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	r := e.recoverer("a")
	w := e.writer("s-fr", "w1")
	for _, id := range []string{"c-1", "c-2", "c-3", "c-4"} {
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusTimeout, "")
	}
	// The genuine plan of c-4 is the model of what a forger writes.
	genuine, err := r.Prepare(ctx, "s-fr", "c-4")
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateUser()
	forge := func(callID string, p schema.Plan, state string) {
		t.Helper()
		b, err := json.Marshal(stream.PlanRecord{State: state, Plan: p, ConsumedBy: map[bool]string{true: "c-9"}[state == stream.PlanConsumed]})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.topo.PlanBucket.Create(ctx, recovery.PlanID("s-fr", callID), b); err != nil {
			t.Fatal(err)
		}
	}
	// c-1: the genuine, signed plan of c-4 stored under c-1's plan id.
	forge("c-1", genuine, stream.PlanIssued)
	// c-2: a plan for c-2 signed by a stranger.
	p2 := genuine
	p2.PlanID, p2.PriorCallID, p2.Key, p2.Signer, p2.Sig = recovery.PlanID("s-fr", "c-2"), "c-2", "k-c-2", "", ""
	if p2, err = recovery.SignPlan(stranger, p2); err != nil {
		t.Fatal(err)
	}
	forge("c-2", p2, stream.PlanIssued)
	// c-3: the same, as a consumed record (prepare's long way).
	p3 := p2
	p3.PlanID, p3.PriorCallID, p3.Key, p3.Signer, p3.Sig = recovery.PlanID("s-fr", "c-3"), "c-3", "k-c-3", "", ""
	if p3, err = recovery.SignPlan(stranger, p3); err != nil {
		t.Fatal(err)
	}
	forge("c-3", p3, stream.PlanConsumed)
	for _, id := range []string{"c-1", "c-2", "c-3"} {
		for try := range 2 {
			p, err := r.Prepare(ctx, "s-fr", id)
			if schema.CodeOf(err) != schema.CodePlanUntrusted {
				t.Fatalf("prepare %s (try %d) over a foreign record: %+v %v, want plan_untrusted", id, try, p, err)
			}
			if !strings.Contains(err.Error(), recovery.PlanID("s-fr", id)) {
				t.Fatalf("prepare %s: %v, want the error to name the plan id", id, err)
			}
		}
	}
	if msgs := e.planMsgs(); len(msgs) != 1 || msgs[genuine.PlanID] != 1 {
		t.Fatalf("JW_PLANS %v, want only c-4's genuine plan, once", msgs)
	}
}
