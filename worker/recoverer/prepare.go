package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
		return schema.Errorf(CodeBadRequest, "session %q: want 1-128 bytes of [A-Za-z0-9_-]", session)
	}
	if callID == "" {
		return schema.Errorf(CodeBadRequest, "call_id is required")
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
// not_confirmed for a call still open under a live lease, plan_consumed
// when the call's plan was already used, bad_request.
func (r *Recoverer) Prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	if err := checkTarget(session, callID); err != nil {
		return schema.Plan{}, err
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
			return schema.Plan{}, schema.Errorf(CodeNotConfirmed, "call %q is still open and session %s is owned by %q (epoch %d): wait for its result or for the lease to expire", callID, session, lv.Owner, lv.Epoch)
		}
		if _, err := r.TakeOver(ctx, session); err != nil {
			if errors.Is(err, stream.ErrLeaseHeld) {
				return schema.Plan{}, schema.Errorf(CodeNotConfirmed, "call %q is still open and session %s was just taken by a writer", callID, session)
			}
			return schema.Plan{}, err
		}
		if h, err = r.t.Load(ctx, session); err != nil {
			return schema.Plan{}, err
		}
	}
	review, err := r.latestReview(ctx, session, callID)
	if err != nil {
		return schema.Plan{}, err
	}
	plan, err := recovery.PrepareRetry(schema.Events(h), callID, review,
		recovery.RequireSignedReview(r.cfg.TrustedReviewers), recovery.WithClock(r.cfg.Now))
	if err != nil {
		return schema.Plan{}, err
	}
	return r.issue(ctx, plan)
}

// issue stores the plan (KV create; an existing plan under the id wins) and
// makes sure it is published.
func (r *Recoverer) issue(ctx context.Context, plan schema.Plan) (schema.Plan, error) {
	rec, err := r.plans.Issue(ctx, plan)
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
		return plan, schema.Errorf(CodePlanConsumed, "plan %s for call %q was already used by attempt %q", plan.PlanID, plan.PriorCallID, rec.ConsumedBy)
	}
	if r.afterCreate != nil {
		if err := r.afterCreate(plan); err != nil {
			return schema.Plan{}, err
		}
	}
	if err := r.ensurePublished(ctx, plan); err != nil {
		return schema.Plan{}, err
	}
	r.review.forget(plan.Session, plan.PriorCallID)
	return plan, nil
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
		found := false
		err := r.scanSubject(ctx, r.t.StreamName("PLANS"), subj, true, func(m jetstream.Msg) {
			if m.Headers().Get(jetstream.MsgIDHeader) == plan.PlanID {
				found = true
			}
		})
		if err != nil {
			return err
		}
		if found {
			return nil
		}
	}
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
	keys, err := r.t.Plans.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recoverer: list plans: %w", err)
	}
	out := make([]stream.PlanRecord, 0, len(keys))
	for _, k := range keys {
		rec, err := r.plans.Get(ctx, k)
		if errors.Is(err, stream.ErrPlanNotIssued) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
