package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Inspect loads the session's log and classifies callID (recovery.Inspect).
// The history is read as it is now: for a call still open under a live
// lease the assessment describes the moment, not a confirmed fact. Errors
// are *schema.Error with the codes of DESIGN §2, bad_request for an invalid
// session or an empty call id.
func (r *Recoverer) Inspect(ctx context.Context, session, callID string) (schema.Assessment, error) {
	if err := checkTarget(session, callID); err != nil {
		return schema.Assessment{}, err
	}
	h, err := r.t.Load(ctx, session)
	if err != nil {
		return schema.Assessment{}, err
	}
	return recovery.Inspect(schema.Events(h), callID)
}

func checkTarget(session, callID string) error {
	if !schema.ValidSession(session) {
		return schema.Errorf(schema.CodeBadRequest, "session %q: want 1-128 bytes of [A-Za-z0-9_-]", session)
	}
	if callID == "" {
		return schema.Errorf(schema.CodeBadRequest, "call_id is required")
	}
	return nil
}

// Prepare plans a retry of callID in session from its confirmed history
// and issues the plan exactly once (see the package documentation): the
// latest review accepted for the call is applied (signatures required,
// against Config.TrustedReviewers), recovery.PrepareRetry decides, the plan
// is created in jw_plans and published on jw.plans.<session> with its plan
// id as Nats-Msg-Id. If the plan was issued before (by this or another
// recoverer) the stored plan is returned and its publication made sure of.
//
// Errors are *schema.Error: the codes of recovery.PrepareRetry (completed,
// needs_review, invalid_review, unknown_call, superseded_call, …),
// not_confirmed for a call still open under a live lease, bad_request. A
// plan already consumed whose attempt is not on the log (the consumer was
// stopped in between) is returned and delivered again, for the session's
// next owner to complete once (see worker.TakeOperation).
func (r *Recoverer) Prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	if err := checkTarget(session, callID); err != nil {
		return schema.Plan{}, err
	}
	// The plan id follows from session and call alone: a plan issued
	// before (by this or a racing recoverer) is found without loading the
	// history. The latest review, needed either way, is read meanwhile.
	var (
		wg        sync.WaitGroup
		review    *schema.Review
		reviewErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		review, reviewErr = r.latestReview(ctx, session, callID)
	}()
	rec, err := r.plans.Get(ctx, recovery.PlanID(session, callID))
	wg.Wait()
	switch {
	case err != nil && !errors.Is(err, stream.ErrPlanNotIssued):
		return schema.Plan{}, err
	case reviewErr != nil:
		return schema.Plan{}, reviewErr
	case err == nil && rec.State == stream.PlanIssued && rec.Plan.Session == session && rec.Plan.PriorCallID == callID &&
		(review == nil || review.Verdict != schema.VerdictCompleted):
		// Issued before and still unused: the stored plan stands, as it
		// would after a KV create that lost (one plan per call). A
		// completed review since, or a consumed plan, goes the full way
		// for its error code (completed, superseded_call, plan_consumed).
		if err := r.ensureDeliverable(ctx, rec.Plan); err != nil {
			return schema.Plan{}, err
		}
		r.review.forget(session, callID)
		return rec.Plan, nil
	}
	h, err := r.t.Load(ctx, session)
	if err != nil {
		return schema.Plan{}, err
	}
	if isOpen(h, callID) {
		// Not confirmed: a writer may still finish the call.
		if lv, live, err := r.t.LeaseHolder(ctx, session); err != nil {
			return schema.Plan{}, err
		} else if live {
			return schema.Plan{}, schema.Errorf(schema.CodeNotConfirmed, "call %q is still open and session %s is owned by %q (epoch %d): wait for its result or for the lease to expire", callID, session, lv.Owner, lv.Epoch)
		}
		if _, err := r.TakeOver(ctx, session); err != nil {
			if errors.Is(err, stream.ErrLeaseHeld) {
				return schema.Plan{}, schema.Errorf(schema.CodeNotConfirmed, "call %q is still open and session %s was just taken by a writer", callID, session)
			}
			return schema.Plan{}, err
		}
		if h, err = r.t.Load(ctx, session); err != nil {
			return schema.Plan{}, err
		}
	}
	if room := r.t.WriterRoom(h); room < retryRoom {
		// A retry could not be recorded: refuse now rather than issue a
		// plan that would be spent on an attempt the log cannot hold.
		if _, err := recovery.Inspect(schema.Events(h), callID); err != nil {
			return schema.Plan{}, err
		}
		return schema.Plan{}, schema.Errorf(schema.CodeHistoryTooLarge, "session %s holds %d events: only %d more fit before the history limit (the rest is kept for takeovers), a retry needs %d; no plan", session, len(h), room, retryRoom)
	}
	plan, err := recovery.PrepareRetry(schema.Events(h), callID, review,
		recovery.RequireSignedReview(r.cfg.TrustedReviewers),
		recovery.RequireSignedPlans(r.cfg.TrustedPlanners, r.cfg.TrustedReviewers),
		recovery.WithClock(r.cfg.Now))
	if err != nil {
		return schema.Plan{}, err
	}
	if plan, err = recovery.SignPlan(r.cfg.PlannerKey, plan); err != nil {
		return schema.Plan{}, fmt.Errorf("recoverer: sign plan: %w", err)
	}
	return r.issue(ctx, plan)
}

// retryRoom is how many events a retry records: tool.call, tool.started,
// tool.result.
const retryRoom = 3

// issue stores the plan (KV create; an existing plan under the id wins) and
// makes sure it is published.
func (r *Recoverer) issue(ctx context.Context, plan schema.Plan) (schema.Plan, error) {
	rec, created, err := r.createPlan(ctx, plan)
	if err != nil && !errors.Is(err, stream.ErrPlanConflict) {
		return schema.Plan{}, err
	}
	if err != nil {
		// Issued before from other facts (a review since): one plan per
		// call, the first one stands.
		r.log.Warn().Str("plan_id", plan.PlanID).Str("basis", string(rec.Plan.Basis)).Msg("plan issued before on another basis; returning the stored plan")
	}
	plan = rec.Plan
	if rec.State == stream.PlanConsumed {
		// Consumed, but no attempt of it is on the confirmed log (the
		// history PrepareRetry planned from shows no retry of the call):
		// the consumer was stopped between the two. The session's next
		// owner completes that attempt once; make sure a worker gets the
		// plan.
		r.log.Info().Str("plan_id", plan.PlanID).Str("consumed_by", rec.ConsumedBy).Msg("plan consumed but its attempt never reached the log; delivering it for the next owner to complete")
		if err := r.ensureDeliverable(ctx, plan); err != nil {
			return schema.Plan{}, err
		}
		return plan, nil
	}
	if r.afterCreate != nil {
		if err := r.afterCreate(plan); err != nil {
			return schema.Plan{}, err
		}
	}
	if created {
		// This prepare's KV create stored the plan: nothing can have
		// published it before (a racing publication after it carries the
		// same Msg-Id), so the JW_PLANS lookup is skipped.
		err = r.publishPlan(ctx, plan)
	} else {
		err = r.ensureDeliverable(ctx, plan)
	}
	if err != nil {
		return schema.Plan{}, err
	}
	r.review.forget(plan.Session, plan.PriorCallID)
	return plan, nil
}

// createPlan stores plan as issued with a KV create on its plan id, as
// stream.Plans.Issue does, and also reports whether this create stored it
// (created false: the stored record, whatever its state, and
// stream.ErrPlanConflict if it is a different plan).
func (r *Recoverer) createPlan(ctx context.Context, plan schema.Plan) (rec stream.PlanRecord, created bool, err error) {
	rec = stream.PlanRecord{State: stream.PlanIssued, Plan: plan}
	b, err := json.Marshal(rec)
	if err != nil {
		return rec, false, fmt.Errorf("recoverer: encode plan %s: %w", plan.PlanID, err)
	}
	rev, err := r.t.Plans.Create(ctx, plan.PlanID, b)
	if err == nil {
		rec.Revision = rev
		return rec, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return stream.PlanRecord{}, false, fmt.Errorf("recoverer: issue plan %s: %w", plan.PlanID, err)
	}
	have, err := r.plans.Get(ctx, plan.PlanID)
	if err != nil {
		return stream.PlanRecord{}, false, err
	}
	if !stream.SamePlan(have.Plan, plan) {
		return have, false, fmt.Errorf("%w: %s", stream.ErrPlanConflict, plan.PlanID)
	}
	return have, false, nil
}

// ensurePublished publishes the plan on jw.plans.<session> with its plan id
// as Nats-Msg-Id, unless JW_PLANS already holds it. The check makes a
// re-publication after the dedup window safe; the Msg-Id makes two
// publishers racing inside it safe.
func (r *Recoverer) ensurePublished(ctx context.Context, plan schema.Plan) error {
	subj := r.t.PlansSubject(plan.Session)
	last, err := r.t.PlanLog.GetLastMsgForSubject(ctx, subj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("recoverer: read %s: %w", subj, err)
	case last.Header.Get(jetstream.MsgIDHeader) == plan.PlanID:
		return nil
	default:
		found := errors.New("found")
		err := r.t.ReadSubject(ctx, r.t.StreamName("PLANS"), subj, func(m *jetstream.RawStreamMsg) error {
			if m.Header.Get(jetstream.MsgIDHeader) == plan.PlanID {
				return found
			}
			return nil
		})
		if errors.Is(err, found) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return r.publishPlan(ctx, plan)
}

// ensureDeliverable makes sure a tool worker will see an unused plan: it
// is published (ensurePublished), and if the tool workers' plan consumer
// has acknowledged or terminated its latest publication while the plan is
// still to be used (a worker that dropped it, a consumer that lost it), it
// is published again, with Msg-Id <plan_id>/again/<seq of that
// publication>, so racing prepares publish it again once. Using the plan
// stays single-use whatever the number of its messages.
func (r *Recoverer) ensureDeliverable(ctx context.Context, plan schema.Plan) error {
	subj := r.t.PlansSubject(plan.Session)
	var last uint64
	err := r.t.ReadSubject(ctx, r.t.StreamName("PLANS"), subj, func(m *jetstream.RawStreamMsg) error {
		if id := m.Header.Get(jetstream.MsgIDHeader); id == plan.PlanID || strings.HasPrefix(id, plan.PlanID+"/again/") {
			last = m.Sequence
		}
		return nil
	})
	if err != nil {
		return err
	}
	if last == 0 {
		return r.publishPlan(ctx, plan)
	}
	cons, err := r.t.PlanLog.Consumer(ctx, r.t.PlanConsumerName())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil // no tool worker ran yet: the first one reads every plan
	}
	if err != nil {
		return fmt.Errorf("recoverer: plan consumer: %w", err)
	}
	info := cons.CachedInfo()
	if info.AckFloor.Stream < last {
		return nil // still pending, or in a worker's hands
	}
	msg := nats.NewMsg(subj)
	if msg.Data, err = json.Marshal(plan); err != nil {
		return err
	}
	if err := r.publishSync(ctx, msg, fmt.Sprintf("%s/again/%d", plan.PlanID, last)); err != nil {
		return fmt.Errorf("recoverer: publish plan %s again: %w", plan.PlanID, err)
	}
	r.log.Info().Str("session", plan.Session).Str("plan_id", plan.PlanID).Uint64("lost_seq", last).Msg("plan message acknowledged without the plan being used: published again")
	return nil
}

// publishPlan publishes the plan on jw.plans.<session> with its plan id as
// Nats-Msg-Id (a racing publication of the same plan inside the dedup
// window is dropped by the server).
func (r *Recoverer) publishPlan(ctx context.Context, plan schema.Plan) error {
	subj := r.t.PlansSubject(plan.Session)
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subj)
	msg.Data = b
	if err := r.publishSync(ctx, msg, plan.PlanID); err != nil {
		return fmt.Errorf("recoverer: publish plan %s: %w", plan.PlanID, err)
	}
	r.log.Info().Str("session", plan.Session).Str("call_id", plan.PriorCallID).Str("plan_id", plan.PlanID).Str("basis", string(plan.Basis)).Msg("plan issued")
	return nil
}

// RepairPlans publishes every plan that jw_plans holds as issued but
// JW_PLANS does not: what a crash between a plan's KV create and its
// publication left behind. Run calls it at start.
func (r *Recoverer) RepairPlans(ctx context.Context) error {
	recs, err := r.planRecords(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.State != stream.PlanIssued {
			continue
		}
		if err := r.ensurePublished(ctx, rec.Plan); err != nil {
			return err
		}
	}
	return nil
}

// planRecords reads every plan in jw_plans.
func (r *Recoverer) planRecords(ctx context.Context) ([]stream.PlanRecord, error) {
	recs, err := r.t.ListPlans(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("recoverer: list plans: %w", err)
	}
	return recs, nil
}
