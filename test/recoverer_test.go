package test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/recoverer"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestRecovererWithToolWorker runs a recovery worker and a tool worker in
// one process on an embedded server and drives them only through the wire:
// jw.api.call, jw.assessments, jw.reviews, jw.api.prepare. An idempotent
// order that fails after its write is planned on request and retried by the
// tool worker with the same key: one order. A non-idempotent ledger post
// that fails is needs_review; a forged review changes nothing; a signed
// not_executed review and a prepare get it one more attempt.
func TestRecovererWithToolWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: 2 * time.Second}})
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	ledger := worker.Tool{
		Metadata: effect.Metadata{Name: "ledger.post"}.WithEffect(effect.NonIdempotent, "ledger-v1"),
		Body: func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			if posts.Add(1) == 1 {
				return nil, errors.New("ledger: connection reset after send")
			}
			return json.RawMessage(`{"posted":true}`), nil
		},
	}
	reg, err := worker.NewRegistry(append(tl.List(), ledger)...)
	if err != nil {
		t.Fatal(err)
	}
	pl := newPlanner(t)
	tw, err := toolworker.New(toolworker.Config{Topology: topo, Registry: reg, Owner: "tw-1", IdleTimeout: time.Minute, CallTimeout: 20 * time.Second, Runtime: worker.Config{TrustedPlanners: pl.trusted}})
	if err != nil {
		t.Fatal(err)
	}
	reviewer, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	pub, _ := reviewer.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(pub)
	rec, err := recoverer.New(recoverer.Config{Topology: topo, TrustedReviewers: trusted, PlannerKey: pl.kp})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- tw.Run(runCtx) }()
	go func() { done <- rec.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})

	assessments, err := nc.SubscribeSync(topo.Names().AssessmentsSubject("*"))
	if err != nil {
		t.Fatal(err)
	}
	// Assessments arrive one by one or in batches (docs/protocol.md
	// §5.4): next returns them one at a time.
	var queued []schema.Assessment
	next := func(what string) schema.Assessment {
		t.Helper()
		for len(queued) == 0 {
			m, err := assessments.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("no assessment of %s: %v", what, err)
			}
			as, err := schema.DecodeAssessments(m.Data)
			if err != nil {
				t.Fatalf("assessment message on %s: %v", m.Subject, err)
			}
			queued = as
		}
		a := queued[0]
		queued = queued[1:]
		return a
	}
	waitAssessment := func(callID string) schema.Assessment {
		t.Helper()
		for {
			if a := next(callID); a.CallID == callID {
				return a
			}
		}
	}
	api := func(endpoint string, body, out any) string {
		t.Helper()
		b, _ := json.Marshal(body)
		var m *nats.Msg
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, err = nc.RequestWithContext(ctx, topo.Names().APISubject(endpoint), b)
			if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: %v", endpoint, err)
		}
		if code := service.AnswerCode(m); code != "" {
			return code
		}
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s answer %s: %v", endpoint, m.Data, err)
		}
		return ""
	}

	// The order: written, then a failure.
	tl.FailAfterWrite(1)
	var res schema.Event
	if code := api(service.EndpointCall, schema.Request{V: 1, RequestID: "r-order", Session: "s-shop", Task: "t-1", Tool: tools.OrdersCreate, Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`)}, &res); code != "" {
		t.Fatalf("call: %s", code)
	}
	if res.Result == nil || res.Result.Status != schema.StatusFailed {
		t.Fatalf("order result %+v", res)
	}
	first := res.Result.CallID
	if a := waitAssessment(first); a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionRetryAllowed {
		t.Fatalf("order assessment %+v", a)
	}
	var plan schema.Plan
	if code := api(service.EndpointPrepare, service.Target{Session: "s-shop", CallID: first}, &plan); code != "" {
		t.Fatalf("prepare order: %s", code)
	}
	if plan.Basis != schema.BasisUncertainSafe {
		t.Fatalf("order plan %+v", plan)
	}
	// The tool worker executes the published plan: a retry with the same
	// key completes, and the tool finds the order it wrote.
	retryDone := func(session, prior string) schema.Assessment {
		t.Helper()
		for {
			if a := next("the retry of " + prior); a.Session == session && len(a.Chain) == 2 && a.Chain[0] == prior {
				return a
			}
		}
	}
	if a := retryDone("s-shop", first); a.Outcome != schema.OutcomeCompleted || a.Key != plan.Key {
		t.Fatalf("retry assessment %+v", a)
	}
	if orders, err := tl.Orders(ctx); err != nil || len(orders) != 1 {
		t.Fatalf("orders %+v %v, want exactly one", orders, err)
	}
	if rec, err := stream.NewPlans(topo.PlanBucket).Get(ctx, plan.PlanID); err != nil || rec.State != stream.PlanConsumed {
		t.Fatalf("plan record %+v %v, want consumed", rec, err)
	}
	if code := api(service.EndpointPrepare, service.Target{Session: "s-shop", CallID: first}, &plan); code != string(schema.CodeSupersededCall) {
		t.Fatalf("prepare the retried call again: %q, want superseded_call", code)
	}

	// The ledger post: non-idempotent, fails → needs_review.
	if code := api(service.EndpointCall, schema.Request{V: 1, RequestID: "r-post", Session: "s-books", Task: "t-1", Tool: "ledger.post", Arguments: json.RawMessage(`{"amount":5}`)}, &res); code != "" {
		t.Fatalf("call ledger: %s", code)
	}
	post := res.Result.CallID
	if a := waitAssessment(post); a.Decision != schema.DecisionNeedsReview {
		t.Fatalf("ledger assessment %+v", a)
	}
	publish := func(r schema.Review) {
		t.Helper()
		b, _ := json.Marshal(r)
		if _, err := topo.JS.Publish(ctx, topo.Names().ReviewsSubject("s-books"), b); err != nil {
			t.Fatal(err)
		}
	}
	sign := func(kp nkeys.KeyPair, v schema.Verdict) schema.Review {
		r, err := recovery.SignReview(kp, schema.Review{V: 1, Session: "s-books", CallID: post, Operator: "bob@finance", Evidence: "bank statement 7", Verdict: v})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	publish(sign(stranger, schema.VerdictNotExecuted))
	if code := api(service.EndpointPrepare, service.Target{Session: "s-books", CallID: post}, &plan); code != string(schema.CodeNeedsReview) {
		t.Fatalf("prepare after a forged review: %q, want needs_review", code)
	}
	if posts.Load() != 1 {
		t.Fatalf("ledger body ran %d times before the review, want 1", posts.Load())
	}
	publish(sign(reviewer, schema.VerdictNotExecuted))
	if code := api(service.EndpointPrepare, service.Target{Session: "s-books", CallID: post}, &plan); code != "" || plan.Basis != schema.BasisReviewedNotExecuted {
		t.Fatalf("prepare after the signed review: %q %+v", code, plan)
	}
	if a := retryDone("s-books", post); a.Outcome != schema.OutcomeCompleted {
		t.Fatalf("ledger retry %+v", a)
	}
	if posts.Load() != 2 {
		t.Fatalf("ledger body ran %d times, want 2", posts.Load())
	}
	var st service.Status
	if code := api(service.EndpointStatus, service.StatusRequest{}, &st); code != "" || st.Plans.Consumed != 2 || st.Plans.Issued != 0 || len(st.OpenCalls) != 0 {
		t.Fatalf("status %q %+v", code, st)
	}
}

// TestLostPlanMessageDeliveredAgain: a plan whose message the tool workers'
// consumer lost (here terminated through the shared consumer, as a buggy
// or hostile worker could) stays issued with nothing left to run it; the
// host's next prepare publishes it again, once, and a tool worker runs it:
// one retry, one order, the plan consumed.
func TestLostPlanMessageDeliveredAgain(t *testing.T) {
	s := startStack(t, time.Second, nil)
	ctx := s.ctx

	// An order that writes its record and fails; the worker then stops.
	stopA := s.worker("tw-a", nil)
	s.tools.FailAfterWrite(1)
	var res schema.Event
	if code := s.api(service.EndpointCall, schema.Request{V: 1, RequestID: "r-1", Session: "s-lost", Task: "t-1", Tool: tools.OrdersCreate, Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`)}, &res); code != "" || res.Result == nil || res.Result.Status != schema.StatusFailed {
		t.Fatalf("call: %q %+v", code, res)
	}
	stopA()
	first := res.Result.CallID
	var plan schema.Plan
	if code := s.api(service.EndpointPrepare, service.Target{Session: "s-lost", CallID: first}, &plan); code != "" {
		t.Fatalf("prepare: %s", code)
	}
	// The plan's message is terminated through the tool workers' consumer.
	cons, err := s.topo.PlanLog.Consumer(ctx, s.topo.Names().PlanConsumerName(s.topo.Names().PartitionOf("s-lost")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Term(); err != nil {
		t.Fatal(err)
	}
	s.worker("tw-b", nil)
	streamtest.Eventually(t, waitLimit, "the consumer has nothing left", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	plans := stream.NewPlans(s.topo.PlanBucket)
	if rec, _ := plans.Get(ctx, plan.PlanID); rec.State != stream.PlanIssued {
		t.Fatalf("plan %s is %s, want still issued (its message is gone)", plan.PlanID, rec.State)
	}
	// The host asks again: the plan is published again and runs once.
	var again schema.Plan
	if code := s.api(service.EndpointPrepare, service.Target{Session: "s-lost", CallID: first}, &again); code != "" || again.PlanID != plan.PlanID {
		t.Fatalf("prepare again: %q %+v", code, again)
	}
	streamtest.Eventually(t, waitLimit, "the plan runs", func() bool {
		r, err := plans.Get(ctx, plan.PlanID)
		return err == nil && r.State == stream.PlanConsumed
	})
	streamtest.Eventually(t, waitLimit, "the retry's result", func() bool {
		h, _ := s.topo.Logs().Load(ctx, "s-lost")
		return len(h) > 0 && h[len(h)-1].Type == schema.TypeResult
	})
	h, _ := s.topo.Logs().Load(ctx, "s-lost")
	retries := 0
	for _, ev := range h {
		if c := ev.Call; c != nil && c.Operation != nil && c.Operation.Retry != nil {
			retries++
		}
	}
	if orders, _ := s.tools.Orders(ctx); len(orders) != 1 || retries != 1 {
		t.Fatalf("%d orders and %d retries, want 1 and 1", len(orders), retries)
	}
	// Asking once more changes nothing: the call has its retry now.
	if code := s.api(service.EndpointPrepare, service.Target{Session: "s-lost", CallID: first}, &again); code != string(schema.CodeSupersededCall) {
		t.Fatalf("prepare after the retry: %q, want superseded_call", code)
	}
	info, err := s.topo.PlanLog.Info(ctx, jetstream.WithSubjectFilter(s.topo.Names().PlansStoredSubject("s-lost")))
	if err != nil || info.State.Subjects[s.topo.Names().PlansStoredSubject("s-lost")] != 2 {
		t.Fatalf("plan messages %v %v, want the first and one more", info.State.Subjects, err)
	}
}
