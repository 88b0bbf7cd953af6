package recoverer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// checkReview decodes a review published on jw.reviews.<subjectSession>
// and checks what can be checked without the history: well-formed, for the
// session of its subject, signed by a trusted reviewer key. The error is an
// invalid_review (or field_too_long) *schema.Error.
func (r *Recoverer) checkReview(subjectSession string, data []byte) (schema.Review, error) {
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
	if err := recovery.VerifyReview(rv, r.cfg.TrustedReviewers); err != nil {
		return rv, err
	}
	return rv, nil
}

// consumeReviews checks every review on jw.reviews.> as it arrives and logs
// it accepted or rejected: signed by a trusted key, for its subject's
// session, and for a call of that session's log that is the latest attempt
// of its chain. Accepted reviews stay in JW_REVIEWS (the audit trail), where
// prepare reads the latest one for a call; nothing else is stored.
func (r *Recoverer) consumeReviews(ctx context.Context) error {
	cons, err := r.t.JS.CreateOrUpdateConsumer(ctx, r.t.StreamName("REVIEWS"), jetstream.ConsumerConfig{
		Durable:       r.consumerName("reviews"),
		Description:   "jingwei recovery worker " + r.cfg.Name + ": checks reviews",
		FilterSubject: r.t.ReviewsSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
	})
	if err != nil {
		return fmt.Errorf("reviews consumer: %w", err)
	}
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
		rv, err := r.acceptReview(ctx, session, m.Data())
		lg := r.log.With().Str("session", session).Str("call_id", rv.CallID).Str("operator", rv.Operator).Str("signer", rv.Signer).Str("verdict", string(rv.Verdict)).Logger()
		if err != nil {
			lg.Warn().Err(err).Str("code", string(schema.CodeOf(err))).Msg("review rejected")
		} else {
			lg.Info().Msg("review accepted")
			if rv.Verdict == schema.VerdictCompleted {
				// Settled: no retry will ever be planned, so the call no
				// longer awaits review.
				r.review.forget(session, rv.CallID)
			}
		}
		if err := m.Ack(); err != nil {
			return fmt.Errorf("ack review: %w", err)
		}
	}
}

// acceptReview checks a review fully: checkReview, then the call against
// the session's log (it must exist and be the latest attempt).
func (r *Recoverer) acceptReview(ctx context.Context, session string, data []byte) (schema.Review, error) {
	rv, err := r.checkReview(session, data)
	if err != nil {
		return rv, err
	}
	h, err := r.t.Load(ctx, session)
	if err != nil {
		return rv, err
	}
	if _, err := recovery.Inspect(schema.Events(h), rv.CallID); err != nil {
		return rv, fmt.Errorf("review of call %q: %w", rv.CallID, err)
	}
	return rv, nil
}

// latestReview returns the latest review on jw.reviews.<session> for callID
// that passes checkReview (nil if none). Rejected reviews are skipped: a
// forged or unsigned review changes nothing.
func (r *Recoverer) latestReview(ctx context.Context, session, callID string) (*schema.Review, error) {
	checks, err := r.Reviews(ctx, session, callID)
	if err != nil {
		return nil, err
	}
	for i := len(checks) - 1; i >= 0; i-- {
		if checks[i].Accepted {
			return &checks[i].Review, nil
		}
	}
	return nil, nil
}

// scanSubject reads every message on subj in stream order.
func (r *Recoverer) scanSubject(ctx context.Context, streamName, subj string, headersOnly bool, fn func(jetstream.Msg)) error {
	cons, err := r.t.JS.OrderedConsumer(ctx, streamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		HeadersOnly:    headersOnly,
		// A safety net: the consumer is deleted when the scan ends.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("recoverer: read %s: %w", subj, err)
	}
	// Stop does not delete an ordered consumer and a stream allows 1,000:
	// delete it, or frequent prepares would exhaust them.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = r.t.JS.DeleteConsumer(dctx, streamName, info.Name)
		}
	}()
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("recoverer: read %s: %w", subj, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("recoverer: read %s: %w", subj, err)
		}
		fn(m)
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("recoverer: read %s: %w", subj, err)
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}

// ReviewCheck is one review of a call on jw.reviews.<session>, judged as
// prepare judges it: Accepted when it is well formed, for its subject's
// session and signed by a trusted reviewer key; otherwise Code and Reason
// say why it is ignored. Of the accepted ones, the latest decides.
type ReviewCheck struct {
	// Seq is the review's sequence in JW_REVIEWS.
	Seq      uint64        `json:"seq"`
	Review   schema.Review `json:"review"`
	Accepted bool          `json:"accepted"`
	Code     string        `json:"code,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

// Reviews returns every review published for callID in session, in stream
// order, each with this recoverer's judgement of it (see ReviewCheck). A
// message that does not even decode to a review of callID is not listed.
func (r *Recoverer) Reviews(ctx context.Context, session, callID string) ([]ReviewCheck, error) {
	if err := checkTarget(session, callID); err != nil {
		return nil, err
	}
	subj := r.t.ReviewsSubject(session)
	if _, err := r.t.Reviews.GetLastMsgForSubject(ctx, subj); errors.Is(err, jetstream.ErrMsgNotFound) {
		return []ReviewCheck{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("recoverer: read reviews of %s: %w", session, err)
	}
	out := []ReviewCheck{}
	err := r.scanSubject(ctx, r.t.StreamName("REVIEWS"), subj, false, func(m jetstream.Msg) {
		rv, err := r.checkReview(session, m.Data())
		if rv.CallID != callID {
			return
		}
		c := ReviewCheck{Review: rv, Accepted: err == nil}
		if md, merr := m.Metadata(); merr == nil {
			c.Seq = md.Sequence.Stream
		}
		if err != nil {
			c.Code = string(schema.CodeOf(err))
			c.Reason = err.Error()
			if c.Code != "" {
				c.Reason = strings.Replace(c.Reason, c.Code+": ", "", 1)
			}
		}
		out = append(out, c)
	})
	return out, err
}
