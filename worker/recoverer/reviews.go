package recoverer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/service"
)

// check decodes a review published on jw.reviews.<subjectSession>
// and checks what can be checked without the history: well-formed, for the
// session of its subject, signed by a trusted reviewer key. The error is an
// invalid_review (or field_too_long) *schema.Error.
func (r *reviewChecker) check(subjectSession string, data []byte) (schema.Review, error) {
	rv, err := recovery.DecodeReview(data)
	if err != nil {
		return rv, err
	}
	switch {
	case rv.Session != subjectSession:
		return rv, schema.Errorf(schema.CodeInvalidReview, "review for session %q published on the subject of session %q", rv.Session, subjectSession)
	case rv.CallID == "":
		return rv, schema.Errorf(schema.CodeInvalidReview, "review names no call")
	case len(rv.CallID) > schema.MaxFieldBytes:
		return rv, schema.Errorf(schema.CodeFieldTooLong, "review call_id is %d bytes (limit %d)", len(rv.CallID), schema.MaxFieldBytes)
	case !rv.Verdict.Valid():
		return rv, schema.Errorf(schema.CodeInvalidReview, "review has unknown verdict %q", rv.Verdict)
	}
	if err := recovery.VerifyReviewBy(rv, r.cfg.TrustedReviewers, r.cfg.TrustedProbers); err != nil {
		return rv, err
	}
	return rv, nil
}

// reviewChecker is the recoverer's review service: it consumes
// jw.reviews.> and logs each review accepted or rejected, and judges the
// reviews of a call for prepare and status. settled is called for a call
// an accepted completed review settles.
type reviewChecker struct {
	*base
	settled func(session, callID string)
	// load reads a session's log for a check (nil: Logs.Load); a test
	// makes it fail.
	load func(ctx context.Context, session string) ([]schema.Event, error)
}

// errUnchecked is a review whose check could not be made (the session's
// log or its reviews could not be read): it is neither accepted nor
// rejected, and delivered again.
var errUnchecked = errors.New("review not checked")

// recheckAfter is how long an unchecked review waits for its redelivery.
const recheckAfter = time.Second

// run checks every review on jw.reviews.> as it arrives and logs
// it accepted or rejected: signed by a trusted key, for its subject's
// session, for a call of that session's log that is the latest attempt of
// its chain, and not contradicting a completed review of the call already
// on record (review_conflict: completed is final). Reviews stay in
// JW_REVIEWS (the audit trail, which denies deletes), where prepare folds
// them for a call; nothing else is stored.
func (r *reviewChecker) run(ctx context.Context) error {
	cons, err := r.t.JS.CreateOrUpdateConsumer(ctx, r.t.Names().StreamName("REVIEWS"), jetstream.ConsumerConfig{
		Durable:       r.consumerName("reviews"),
		Description:   "jingwei recovery worker " + r.cfg.Name + ": checks reviews",
		FilterSubject: r.t.Names().ReviewsSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
	})
	if err != nil {
		return fmt.Errorf("reviews consumer: %w", err)
	}
	own := cons.CachedInfo()
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("reviews consumer: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reviews consumer: %w", err)
		}
		session := stream.SessionOf(m.Subject())
		md, ok := stream.DeliveredBy(m, own)
		if !ok {
			// Another consumer's delivery on this consumer's inbox: not a
			// review of the stream.
			r.log.Warn().Str("subject", m.Subject()).Str("reply", m.Reply()).Msg("reviews consumer: a message another consumer delivered on its inbox dropped")
			continue
		}
		seq := md.Sequence.Stream
		rctx, endSpan := r.startReviewSpan(ctx, m)
		rv, err := r.accept(rctx, session, seq, m.Data())
		endSpan(rctx, rv, err)
		lg := r.log.With().Str("session", session).Str("call_id", rv.CallID).Str("operator", rv.Operator).Str("source", rv.Source()).Str("probe", rv.Probe).Str("signer", rv.Signer).Str("verdict", string(rv.Verdict)).Uint64("seq", seq).Logger()
		if errors.Is(err, errUnchecked) {
			// Not judged: a review acknowledged unjudged would be forgotten
			// (a completed one would leave its call awaiting review until a
			// restart). It comes again after recheckAfter.
			lg.Warn().Err(err).Dur("retry_in", recheckAfter).Msg("review not checked yet; delivered again")
			if err := m.NakWithDelay(recheckAfter); err != nil {
				return fmt.Errorf("nak review: %w", err)
			}
			continue
		}
		if o := r.outcomes(); o != nil {
			o.ReviewJudged(rv.Verdict, codeOf(err))
		}
		if ro, ok := r.cfg.Observer.(ReviewObserver); ok {
			ro.Reviewed(rv, err == nil)
		}
		switch {
		case errors.Is(err, schema.ErrReviewConflict):
			lg.Warn().Err(err).Str("code", string(schema.CodeReviewConflict)).Msg("review rejected: it contradicts a completed review on record")
		case err != nil:
			lg.Warn().Err(err).Str("code", string(schema.CodeOf(err))).Msg("review rejected")
		default:
			lg.Info().Msg("review accepted")
			if rv.Verdict == schema.VerdictCompleted {
				// Settled: no retry will ever be planned, so the call no
				// longer awaits review.
				r.settled(session, rv.CallID)
			}
		}
		if err := m.Ack(); err != nil {
			return fmt.Errorf("ack review: %w", err)
		}
	}
}

// accept checks a review fully: check, then the call against
// the session's log (it must exist and be the latest attempt), then the
// review against the others of the call on record (FoldReviews: it must
// not contradict a completed one). seq is the review's JW_REVIEWS sequence.
func (r *reviewChecker) accept(ctx context.Context, session string, seq uint64, data []byte) (schema.Review, error) {
	rv, err := r.check(session, data)
	if err != nil {
		return rv, err
	}
	load := r.load
	if load == nil {
		load = r.t.Logs().Load
	}
	h, err := load(ctx, session)
	if err != nil {
		if errors.As(err, new(*schema.Error)) {
			return rv, err // the log is what it is (too large, corrupt): judged
		}
		return rv, fmt.Errorf("%w: %w", errUnchecked, err)
	}
	if _, err := inspect(h, rv.CallID); err != nil {
		return rv, fmt.Errorf("review of call %q: %w", rv.CallID, err)
	}
	checks, err := r.list(ctx, session, rv.CallID)
	if err != nil {
		return rv, fmt.Errorf("%w: %w", errUnchecked, err)
	}
	for _, c := range checks {
		if c.Seq == seq && !c.Accepted && c.Code == string(schema.CodeReviewConflict) {
			return rv, schema.Errorf(schema.CodeReviewConflict, "%s", c.Reason)
		}
	}
	return rv, nil
}

// latest returns the review that decides callID (FoldReviews over
// every review on jw.reviews.<session> for it; nil if none stands).
// Rejected reviews are skipped: a forged, unsigned or conflicting review
// changes nothing.
func (r *reviewChecker) latest(ctx context.Context, session, callID string) (*schema.Review, error) {
	checks, err := r.list(ctx, session, callID)
	if err != nil {
		return nil, err
	}
	for _, c := range checks {
		if c.Decides {
			rv := c.Review
			return &rv, nil
		}
	}
	return nil, nil
}

// list is Recoverer.Reviews for a checked target.
func (r *reviewChecker) list(ctx context.Context, session, callID string) ([]service.ReviewCheck, error) {
	var entries []recovery.ReviewEntry
	err := r.t.Reader().ReadSubject(ctx, r.t.Names().StreamName("REVIEWS"), r.t.Names().ReviewsSubject(session), func(m *jetstream.RawStreamMsg) error {
		rv, err := r.check(session, m.Data)
		if rv.CallID == callID {
			entries = append(entries, recovery.ReviewEntry{Review: rv, Err: err, Seq: m.Sequence})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recoverer: read reviews of %s: %w", session, err)
	}
	fold := recovery.FoldReviews(session, callID, entries)
	out := make([]service.ReviewCheck, len(entries))
	for i, e := range entries {
		c := service.ReviewCheck{Seq: e.Seq, Review: e.Review, Source: e.Review.Source(), Accepted: fold.Rejected[i] == nil, Decides: i == fold.Decides}
		if err := fold.Rejected[i]; err != nil {
			c.Code = string(schema.CodeOf(err))
			c.Reason = schema.TextOf(err)
		}
		out[i] = c
	}
	return out, nil
}
