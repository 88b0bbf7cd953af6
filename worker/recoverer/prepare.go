package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/internal/side"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// issuer is the recoverer's plan service: it prepares plans from
// confirmed histories (taking an open call's session over first), issues
// each exactly once (stream.Plans.Issue, then a publication with the plan
// id as Msg-Id), publishes at start what a crash left unpublished
// (RepairPlans), delivers again a plan whose message was lost, and runs the
// auto-planner (Config.AutoPlan).
type issuer struct {
	*base
	plans   *stream.Plans
	pub     *publisher
	reviews *reviewChecker
	leases  *takeovers
	settled func(session, callID string) // a plan was issued for the call
	auto    chan [2]string               // auto-plan queue: session, call
	planner nkeys.KeyPair                // Config.PlannerKey, keys derived once (cachePlannerKey)

	// afterCreate, when set (tests only), runs after a plan's KV create and
	// before its publication; an error stops prepare there, as a crash
	// would.
	afterCreate func(schema.Plan) error
}

func newIssuer(b *base, pub *publisher, reviews *reviewChecker, leases *takeovers, settled func(session, callID string)) *issuer {
	return &issuer{base: b, plans: stream.NewPlans(b.t.PlanBucket), pub: pub, reviews: reviews, leases: leases, settled: settled, auto: make(chan [2]string, 1024), planner: cachePlannerKey(b.cfg.PlannerKey)}
}

// prepare is Recoverer.Prepare for a checked target. It reads the log
// once: a call still open without a live lease is taken over first, and
// the takeover extends the loaded history with what followed it
// (stream.WithLoaded) instead of loading it again.
func (r *issuer) prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	if err := r.identity.verify(ctx); err != nil { // a replaced stream: stream_replaced
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
	side.Go(func() {
		defer wg.Done()
		review, reviewErr = r.reviews.latest(ctx, session, callID)
	})
	rec, err := r.plans.Get(ctx, recovery.PlanID(session, callID))
	wg.Wait()
	switch {
	case err != nil && !errors.Is(err, stream.ErrPlanNotIssued):
		return schema.Plan{}, err
	case reviewErr != nil:
		return schema.Plan{}, reviewErr
	case err == nil && rec.State == stream.PlanIssued && (review == nil || review.Verdict != schema.VerdictCompleted):
		// Issued before and still unused: the stored plan stands, as it
		// would after a KV create that lost (one plan per call) — if it
		// is the one jingwei issued for this call. A completed review
		// since, or a consumed plan, goes the full way for its error code
		// (completed, superseded_call, plan_consumed).
		if err := r.checkStored(rec.Plan, session, callID, nil); err != nil {
			return schema.Plan{}, err
		}
		deliver := r.ensureDeliverable
		if r.justCreated(rec) {
			deliver = r.deliverRecent
		}
		if err := deliver(ctx, rec.Plan); err != nil {
			return schema.Plan{}, err
		}
		r.settled(session, callID)
		return rec.Plan, nil
	}
	loaded, err := r.t.Plans().LoadForPlan(ctx, session)
	if err != nil {
		return schema.Plan{}, err
	}
	h := loaded.Events
	if recovery.IsOpen(h, callID) {
		// Not confirmed: a writer may still finish the call.
		if lv, live, err := r.t.Logs().Writer(ctx, session); err != nil {
			return schema.Plan{}, err
		} else if live {
			return schema.Plan{}, schema.Errorf(schema.CodeNotConfirmed, "call %q is still open and session %s is owned by %q (epoch %d): wait for its result or for the lease to expire", callID, session, lv.Owner, lv.Epoch)
		}
		// The takeover reads only what the log got since the load above.
		var terr error
		if _, h, terr = r.leases.takeOver(ctx, session, stream.WithLoaded(loaded)); terr != nil {
			switch {
			case errors.Is(terr, stream.ErrLeaseHeld):
				return schema.Plan{}, schema.Errorf(schema.CodeNotConfirmed, "call %q is still open and session %s was just taken by a writer", callID, session)
			case errors.Is(terr, stream.ErrFenced):
				// A new owner of the session's partition fenced it first:
				// its fence closed the call, so the history is confirmed
				// now; read what followed the load above.
				if loaded, err = r.t.Plans().ExtendLoaded(ctx, session, loaded); err != nil {
					return schema.Plan{}, err
				}
				h = loaded.Events
				if recovery.IsOpen(h, callID) {
					return schema.Plan{}, schema.Errorf(schema.CodeNotConfirmed, "call %q is still open and session %s was just taken by a writer", callID, session)
				}
			default:
				return schema.Plan{}, terr
			}
		} else if loaded, err = r.t.Plans().ExtendLoaded(ctx, session, loaded); err != nil {
			// The room left is counted on the log with the takeover's
			// fence (and whatever followed it).
			return schema.Plan{}, err
		}
	}
	if err := r.roomForRetry(session, callID, h, loaded); err != nil {
		return schema.Plan{}, err
	}
	plan, err := recovery.PrepareRetry(schema.Events(h), callID, review,
		recovery.RequireSignedReview(r.cfg.TrustedReviewers),
		recovery.RequireSignedPlans(r.cfg.TrustedPlanners, r.cfg.TrustedReviewers),
		recovery.TrustProbers(r.cfg.TrustedProbers),
		recovery.WithClock(r.cfg.Now))
	if err != nil {
		return schema.Plan{}, err
	}
	if plan, err = recovery.SignPlan(r.planner, plan); err != nil {
		return schema.Plan{}, fmt.Errorf("recoverer: sign plan: %w", err)
	}
	return r.issueTraced(ctx, plan)
}

// checkStored refuses a jw_plans record this prepare did not create
// unless it is a plan jingwei issued for the call: the plan id's record
// must name the same session and prior call and carry the signature of a
// trusted planner. Any role that may write jw_plans (a tool worker, for
// its compare-and-set consumption) could store something else under the
// id before the first prepare; returning it would answer with a plan for
// another call, or one no tool worker accepts. The answer is
// plan_untrusted, naming what is wrong, and nothing is published: the
// record needs an operator (the key is taken, so no plan can be issued for
// the call until it is removed).
//
// own, when not nil, is the plan this prepare signed for the call (a
// create that lost): the stored plan is checked against it first
// (verifyStored).
func (r *issuer) checkStored(p schema.Plan, session, callID string, own *schema.Plan) error {
	id := recovery.PlanID(session, callID)
	if p.PlanID != id || p.Session != session || p.PriorCallID != callID {
		return schema.Errorf(schema.CodePlanUntrusted, "jw_plans holds under plan id %s a record for plan %q of session %q, call %q: not the plan of call %q; nothing issued (an operator must remove the record)", id, p.PlanID, p.Session, p.PriorCallID, callID)
	}
	if err := verifyStored(r.planner, r.cfg.TrustedPlanners, p, own); err != nil {
		return schema.Errorf(schema.CodePlanUntrusted, "jw_plans holds plan %s for call %q, but not as jingwei issued it: %v; nothing issued (an operator must remove the record)", id, callID, err)
	}
	return nil
}

// planReadFor bounds how long issue reads again a plan a racing create
// stored that this replica does not show yet.
const planReadFor = 10 * time.Second

// fenceBytes is the room counted for a fence after a retry, beyond the
// fence reserve: a session.fenced event is well under 1 KiB.
const fenceBytes = 1024

// retryNeed is what the session log must still take for a retry of a call
// with args: what a tool worker's runtime asks for before it spends the
// plan, whatever the tool's output limit (worker.RetryRoom: the call, and
// the room it keeps for its start and result), and a fence after it.
func (r *issuer) retryNeed(args json.RawMessage) (int, int64) {
	events, bytes := worker.RetryRoom(args, int(r.t.JS.Conn().MaxPayload()))
	return events + 1, bytes + fenceBytes
}

// roomForRetry refuses, with history_too_large, a plan for callID whose
// attempt the session log has no room to record: fewer events, or fewer
// bytes of serialized history, left before the fence reserve (loaded, the
// log as read, stream.Plans.LoadedRoom) than a retry needs
// (retryNeed). No plan is issued then: no tool
// worker could run it, and it would be held and tried again for nothing.
// A call that inspect refuses (unknown, corrupt) gets that answer first.
func (r *issuer) roomForRetry(session, callID string, h []schema.Event, loaded stream.Loaded) error {
	events, bytes := r.t.Plans().LoadedRoom(loaded)
	var args json.RawMessage
	for i := len(h) - 1; i >= 0; i-- {
		if c := h[i].Call; c != nil && h[i].Type == schema.TypeCall && c.CallID == callID {
			args = c.Arguments
			break
		}
	}
	needEvents, need := r.retryNeed(args)
	if events >= needEvents && bytes >= need {
		return nil
	}
	if _, err := inspect(h, callID); err != nil {
		return err
	}
	return schema.Errorf(schema.CodeHistoryTooLarge, "session %s holds %d events: only %d more events and %d bytes fit before the history limit (the rest is kept for takeovers), a retry needs %d events and %d bytes; no plan", session, len(h), events, bytes, needEvents, need)
}

// issue stores the plan (KV create; an existing plan under the id wins) and
// makes sure it is published.
//
// On a cluster a create that lost to a racing prepare reads the stored
// plan with a direct get, which a replica that has not applied the winning
// create yet answers with "not found": the plan exists (the create said
// so), so the issue is tried again, with backoff, for up to planReadFor,
// and the stored plan returned — never "plan not issued".
func (r *issuer) issue(ctx context.Context, plan schema.Plan) (schema.Plan, error) {
	rec, err := r.plans.Issue(ctx, plan)
	for wait, deadline := 10*time.Millisecond, time.Now().Add(planReadFor); errors.Is(err, stream.ErrPlanNotIssued) && time.Now().Before(deadline); wait = min(2*wait, 500*time.Millisecond) {
		r.log.Debug().Err(err).Str("plan_id", plan.PlanID).Msg("plan created by a racing prepare not yet readable here; reading again")
		select {
		case <-ctx.Done():
			return schema.Plan{}, ctx.Err()
		case <-time.After(wait):
		}
		rec, err = r.plans.Issue(ctx, plan)
	}
	if err != nil && !errors.Is(err, stream.ErrPlanConflict) {
		return schema.Plan{}, err
	}
	if err != nil {
		// Issued before from other facts (a review since): one plan per
		// call, the first one stands.
		r.log.Warn().Str("plan_id", plan.PlanID).Str("basis", string(rec.Plan.Basis)).Msg("plan issued before on another basis; returning the stored plan")
	}
	if !rec.Created {
		if err := r.checkStored(rec.Plan, plan.Session, plan.PriorCallID, &plan); err != nil {
			return schema.Plan{}, err
		}
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
	switch {
	case rec.Created:
		// This prepare's KV create stored the plan: nothing can have
		// published it before (a racing publication after it carries the
		// same Msg-Id), so the JW_PLANS lookup is skipped.
		err = r.publishPlan(ctx, plan)
	case r.justCreated(rec):
		// A racing prepare's create won moments ago: it publishes the
		// plan right after, inside the dedup window, so this prepare's
		// publication with the same Msg-Id makes no second message —
		// whichever comes first is the one — and covers the winner's
		// crash before it published. One request instead of the JW_PLANS
		// lookup and the plan consumer's ack floor.
		err = r.publishPlan(ctx, plan)
	default:
		err = r.ensureDeliverable(ctx, plan)
	}
	if err != nil {
		return schema.Plan{}, err
	}
	r.settled(plan.Session, plan.PriorCallID)
	return plan, nil
}

// ensurePublished publishes the plan on jw.plans.<session> with its plan id
// as Nats-Msg-Id, unless JW_PLANS already holds it. The check makes a
// re-publication after the dedup window safe; the Msg-Id makes two
// publishers racing inside it safe.
func (r *issuer) ensurePublished(ctx context.Context, plan schema.Plan) error {
	seq, err := r.t.Plans().PlanMessage(ctx, plan.Session, plan.PlanID)
	if err != nil || seq > 0 {
		return err
	}
	return r.publishPlan(ctx, plan)
}

// ackFloor is the answer of a plan consumer's ack-floor read
// (stream.Plans.PlanConsumerAckFloor).
type ackFloor struct {
	floor uint64
	ok    bool
	err   error
}

// readAckFloor reads the plan consumer's ack floor for session
// (Plans.PlanConsumerAckFloor) meanwhile: the answer comes on the
// channel returned.
func (r *issuer) readAckFloor(ctx context.Context, session string) <-chan ackFloor {
	floors := make(chan ackFloor, 1)
	side.Go(func() {
		floor, ok, err := r.t.Plans().PlanConsumerAckFloor(ctx, session)
		floors <- ackFloor{floor, ok, err}
	})
	return floors
}

// ensureDeliverable makes sure a tool worker will see an unused plan: it
// is published (ensurePublished), and if the tool workers' plan consumer
// has acknowledged or terminated its latest publication while the plan is
// still to be used (a worker that dropped it, a consumer that lost it), it
// is published again, with Msg-Id <plan_id>/again/<seq of that
// publication>, so racing prepares publish it again once. Using the plan
// stays single-use whatever the number of its messages.
//
// The plan's latest message and the consumer's ack floor are read at
// once (two requests, one round trip): the floor read alongside is no
// older than one read after the message, so the check is the same one a
// moment earlier (an acknowledgement that lands just after either read
// is left to the next prepare, as it was).
func (r *issuer) ensureDeliverable(ctx context.Context, plan schema.Plan) error {
	floors := r.readAckFloor(ctx, plan.Session)
	last, err := r.t.Plans().PlanMessage(ctx, plan.Session, plan.PlanID)
	af := <-floors
	if err != nil {
		return err
	}
	if last == 0 {
		return r.publishPlan(ctx, plan)
	}
	if af.err != nil || !af.ok || af.floor < last {
		return af.err // no tool worker ran yet, or still pending or in a worker's hands
	}
	if err := r.roomForAgain(ctx, plan); err != nil {
		return err
	}
	subj := r.t.Names().PlansSubject(plan.Session)
	msg := nats.NewMsg(subj)
	if msg.Data, err = json.Marshal(plan); err != nil {
		return err
	}
	if err := r.pub.publishSync(ctx, msg, stream.PlanAgainID(plan.PlanID, last)); err != nil {
		return fmt.Errorf("recoverer: publish plan %s again: %w", plan.PlanID, err)
	}
	r.log.Info().Str("session", plan.Session).Str("plan_id", plan.PlanID).Uint64("lost_seq", last).Msg("plan message acknowledged without the plan being used: published again")
	return nil
}

// roomForAgain is roomForRetry for a plan issued before that is about to
// be published again because a tool worker dropped its message — which it
// does when the session log cannot record the attempt: the history is
// loaded, and a session with no room left for the retry is answered
// history_too_large instead of being handed the plan once more.
func (r *issuer) roomForAgain(ctx context.Context, plan schema.Plan) error {
	loaded, err := r.t.Plans().LoadForPlan(ctx, plan.Session)
	if err != nil {
		return err
	}
	return r.roomForRetry(plan.Session, plan.PriorCallID, loaded.Events, loaded)
}

// maxAgainChain bounds how many publications of one plan deliverRecent
// follows through their Msg-Ids before it reads the plan's messages as
// ensureDeliverable does.
const maxAgainChain = 8

// deliverRecent is ensureDeliverable for a plan whose record justCreated
// says was created less than half the JW_PLANS dedup window ago: every
// publication of it so far is younger still (they all follow the create),
// so the server remembers each one's Msg-Id and answers a publication of
// it again as a duplicate carrying the original's stream sequence. The
// plan is published with its plan id as Msg-Id, alongside the plan
// consumer's ack-floor read, instead of looking its latest message up
// first:
//
//   - not a duplicate: nothing had published it (its creator crashed
//     before publishing, or has not yet: its own publication is then the
//     duplicate) — this one is the plan's message;
//   - a duplicate at sequence S with no plan consumer yet, or a floor
//     below S: S is still to be delivered or in a worker's hands (a
//     publication again follows only an acknowledged one, so none
//     exists);
//   - a duplicate at S with the floor at or above S: S was acknowledged,
//     and the plan is published again with Msg-Id PlanAgainID(plan, S) —
//     a new message if none was, or the duplicate of the one that was,
//     whose sequence is checked the same way.
//
// The outcome is ensureDeliverable's (TestDeliverRecentIsEnsureDeliverable).
// The publication takes the place of its lookup of the plan's latest
// message — the subject's last message, and the whole subject when
// another plan of the session was published last — and, when nothing had
// published the plan yet, of the round trip between that lookup and the
// publication. After maxAgainChain publications again it is
// ensureDeliverable.
func (r *issuer) deliverRecent(ctx context.Context, plan schema.Plan) error {
	floors := r.readAckFloor(ctx, plan.Session)
	data, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	var (
		af        ackFloor
		haveFloor bool
	)
	id := plan.PlanID
	for range maxAgainChain {
		ack, err := r.pub.publishAcked(ctx, &nats.Msg{Subject: r.t.Names().PlansSubject(plan.Session), Data: data}, id)
		if err != nil {
			return fmt.Errorf("recoverer: publish plan %s: %w", plan.PlanID, err)
		}
		if !ack.Duplicate {
			if id == plan.PlanID {
				r.log.Info().Str("session", plan.Session).Str("call_id", plan.PriorCallID).Str("plan_id", plan.PlanID).Str("basis", string(plan.Basis)).Msg("plan issued")
			} else {
				r.log.Info().Str("session", plan.Session).Str("plan_id", plan.PlanID).Str("msg_id", id).Msg("plan message acknowledged without the plan being used: published again")
			}
			return nil
		}
		if !haveFloor {
			af, haveFloor = <-floors, true
		}
		if af.err != nil || !af.ok || af.floor < ack.Sequence {
			return af.err // no tool worker ran yet, or still pending or in a worker's hands
		}
		if id == plan.PlanID {
			if err := r.roomForAgain(ctx, plan); err != nil {
				return err
			}
		}
		id = stream.PlanAgainID(plan.PlanID, ack.Sequence)
	}
	return r.ensureDeliverable(ctx, plan)
}

// justCreated reports whether rec, a plan record another prepare stored,
// is still as created (issued, so at its creation revision) and was
// stored less than half the JW_PLANS dedup window ago by the record's own
// server timestamp: a publication of it with its plan id as Msg-Id now is
// deduplicated against its creator's, which comes after the create. The
// margin covers a clock difference between this process and the server
// of up to half the window (one minute by default); beyond it the worst
// case is a second message of the same plan, which stays single-use.
func (r *issuer) justCreated(rec stream.PlanRecord) bool {
	window := r.t.PlanLog.CachedInfo().Config.Duplicates
	return rec.State == stream.PlanIssued && !rec.StoredAt.IsZero() && window > 0 && time.Since(rec.StoredAt) < window/2
}

// publishPlan publishes the plan on jw.plans.<session> with its plan id as
// Nats-Msg-Id (a racing publication of the same plan inside the dedup
// window is dropped by the server).
func (r *issuer) publishPlan(ctx context.Context, plan schema.Plan) error {
	subj := r.t.Names().PlansSubject(plan.Session)
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subj)
	msg.Data = b
	if err := r.pub.publishSync(ctx, msg, plan.PlanID); err != nil {
		return fmt.Errorf("recoverer: publish plan %s: %w", plan.PlanID, err)
	}
	r.log.Info().Str("session", plan.Session).Str("call_id", plan.PriorCallID).Str("plan_id", plan.PlanID).Str("basis", string(plan.Basis)).Msg("plan issued")
	return nil
}

// RepairPlans is Recoverer.RepairPlans.
func (r *issuer) RepairPlans(ctx context.Context) error {
	recs, err := r.planRecords(ctx)
	if err != nil {
		return err
	}
	untrusted := 0
	for _, rec := range recs {
		if rec.State != stream.PlanIssued {
			continue
		}
		if !r.signedPlan(rec.Plan) {
			// A record no trusted planner signed (written with the
			// worker's credential) was never issued: not published.
			untrusted++
			continue
		}
		if err := r.ensurePublished(ctx, rec.Plan); err != nil {
			return err
		}
	}
	if untrusted > 0 {
		r.log.Warn().Int("unsigned_plan_records", untrusted).Msg("jw_plans holds records no trusted planner signed: not published (no tool worker would run them either)")
	}
	return nil
}

// signedPlan reports whether p is a plan jingwei issued: a trusted
// planner signed it, and it sits under its own plan id. jw_plans takes
// writes from the worker role too, so a record is a plan only when its
// signature says so (the rebuild of awaiting review, RepairPlans and
// status count no other).
func (r *base) signedPlan(p schema.Plan) bool {
	return p.PlanID == recovery.PlanID(p.Session, p.PriorCallID) && recovery.VerifyPlan(p, r.cfg.TrustedPlanners) == nil
}

// planRecords reads every plan in jw_plans.
func (r *issuer) planRecords(ctx context.Context) ([]stream.PlanRecord, error) {
	recs, err := r.t.Plans().ListPlans(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("recoverer: list plans: %w", err)
	}
	return recs, nil
}

// queue queues a retry_allowed call for the auto-planner (Config.AutoPlan);
// a full queue is logged and the call left to an explicit prepare.
func (r *issuer) queue(session, callID string) {
	select {
	case r.auto <- [2]string{session, callID}:
	default:
		r.log.Warn().Str("session", session).Str("call_id", callID).Msg("auto-plan queue full; plan not issued (prepare it explicitly)")
	}
}

// autoPlanRetry is how long the auto-planner waits before it tries again a
// plan it could not issue for a transient reason (stream.Transient).
const autoPlanRetry = time.Second

// autoPlan issues plans for queued retry_allowed assessments (AutoPlan); a
// prepare that fails for a transient reason is queued again after
// autoPlanRetry.
func (r *issuer) autoPlan(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-r.auto:
			session, callID := f[0], f[1]
			p, err := r.prepare(ctx, session, callID)
			if err != nil && ctx.Err() == nil && stream.Transient(err) {
				// JetStream unreachable for a while (a cut-off node, an
				// election): the call is in no durable queue, so it is
				// queued again rather than left without its plan.
				r.log.Warn().Err(err).Str("session", session).Str("call_id", callID).Dur("retry_in", autoPlanRetry).Msg("auto-plan: no plan yet; tried again")
				time.AfterFunc(autoPlanRetry, func() {
					if ctx.Err() == nil {
						r.queue(session, callID)
					}
				})
				continue
			}
			if err != nil {
				r.log.Info().Err(err).Str("session", session).Str("call_id", callID).Msg("auto-plan: no plan")
				continue
			}
			r.log.Info().Str("session", session).Str("call_id", callID).Str("plan_id", p.PlanID).Msg("auto-plan: plan issued")
		}
	}
}
