package recoverer

import (
	"context"
	"fmt"

	"github.com/jingwei/jingwei/schema"
)

// Observer is told what the recoverer publishes and takes over, for
// metrics (package metrics implements it). Its methods are called on the
// recoverer's goroutines, after the fact: they must be quick and safe for
// concurrent use.
type Observer interface {
	// Assessed reports one published assessment (by the classifier, a
	// takeover or a prepare).
	Assessed(a schema.Assessment)
	// TookOver reports a takeover of session: the confirmed history h it
	// loaded (the fence included, when there is one) and the assessments
	// of the calls the takeover closed (the classifier publishes them when
	// it reads the fence; Assessed reports them then).
	TookOver(session string, h []schema.Event, assessed []schema.Assessment)
}

// OutcomeObserver is an Observer that is also told how the recoverer
// answered: each plan it was asked for (jw.api.prepare), each review it
// judged, and each call whose approval timed out. The recoverer calls
// these when its Config.Observer implements it; they must be quick and
// safe for concurrent use.
type OutcomeObserver interface {
	Observer
	// PlanAnswered reports one prepare: code "" when a plan was issued
	// (or an issued one returned again), else the refusal's code
	// (needs_review, completed, superseded_call, …).
	PlanAnswered(code schema.Code)
	// ReviewJudged reports one review of JW_REVIEWS judged: code "" when
	// accepted, else why it was rejected (invalid_review,
	// review_conflict, …).
	ReviewJudged(verdict schema.Verdict, code schema.Code)
	// ApprovalTimedOut reports a call that waited for approval and ended
	// rejected at stage approval at or after its deadline.
	ApprovalTimedOut(session, callID string)
}

// outcomes returns cfg.Observer as an OutcomeObserver, or nil.
func (b *base) outcomes() OutcomeObserver {
	o, _ := b.cfg.Observer.(OutcomeObserver)
	return o
}

// ReviewObserver, when Config.Observer also implements it, is told of
// every review the review checker judged: accepted or not. It is called
// before the call a completed review settles leaves the calls awaiting
// review. It must be quick and safe for concurrent use.
type ReviewObserver interface {
	Reviewed(rv schema.Review, accepted bool)
}

// ConsumerLag returns how far the recoverer's classifier is behind the
// session logs: the events its durable consumer on the events stream has
// not been delivered yet (pending) and those delivered but not yet
// acknowledged (ackPending). It asks the server (consumer info).
func (r *Recoverer) ConsumerLag(ctx context.Context) (pending, ackPending uint64, err error) {
	c, err := r.t.Events.Consumer(ctx, r.consumerName("events"))
	if err != nil {
		return 0, 0, fmt.Errorf("recoverer: events consumer: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("recoverer: events consumer: %w", err)
	}
	return info.NumPending, uint64(info.NumAckPending), nil
}
