package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// ReviewReceipt is what SubmitReview reports about one signed review.
type ReviewReceipt struct {
	// Review is the review as published.
	Review schema.Review `json:"review"`
	// Stream and Seq locate the published review in JW_REVIEWS; both are
	// zero when nothing was published.
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Assessment is the recovery worker's view of the call after the
	// review, when it answered jw.api.inspect; nil otherwise.
	Assessment *schema.Assessment `json:"assessment,omitempty"`
	// Check is how the recovery worker judges the review (accepted, or
	// ignored and why), when it answered jw.api.status; nil otherwise.
	Check *ReviewCheck `json:"check,omitempty"`
	// InspectErr is why Assessment is nil after a review that was
	// published and not ignored; nil otherwise. Not part of the JSON.
	InspectErr error `json:"-"`
}

// Published reports whether the review was published (and acknowledged).
func (r ReviewReceipt) Published() bool { return r.Seq != 0 }

// ReviewMsgID returns the Nats-Msg-Id a signed review is published with:
// "rv-" and the first 16 bytes of the SHA-256 of its JSON, in hex, so
// sending the same review twice stores it once.
func ReviewMsgID(r schema.Review) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "rv-" + hex.EncodeToString(sum[:16]), nil
}

// SubmitReview publishes the signed review r on <prefix>.reviews.<session>
// and asks the recovery worker how it judges it, on the client's
// connection (the reviewer role may do all of it). In order:
//
//  1. jw.api.inspect of the reviewed call: when the call is not in the
//     session's log (unknown_call) or is not the latest attempt of its
//     chain (superseded_call), that *schema.Error is returned and nothing
//     is published (receipt.Published() is false). Any other answer,
//     or none, does not stop the review.
//  2. a JetStream publish with Nats-Msg-Id ReviewMsgID(r), bounded by the
//     client's timeout; a failure is returned as an uncoded error.
//  3. jw.api.status for the call: the review's check, found by its
//     sequence. When the recovery worker ignores it (an untrusted signer,
//     a conflict with a completed review), the returned error is a
//     *schema.Error with the check's code (invalid_review,
//     review_conflict, …), and the receipt holds the check: the review is
//     published and stays in JW_REVIEWS all the same (the audit trail).
//     No answer leaves receipt.Check nil and is not an error.
//  4. jw.api.inspect again: the call's assessment (receipt.Assessment), or
//     why there is none (receipt.InspectErr).
//
// SubmitReview neither signs nor validates r's fields: sign it with
// recovery.SignReview first. The CLI's `jingwei review` and the review
// console both submit reviews through it.
func (c *Client) SubmitReview(ctx context.Context, r schema.Review) (ReviewReceipt, error) {
	rc := ReviewReceipt{Review: r}
	// A review of a call that is not in the log, or not its chain's
	// latest attempt, would be rejected: say so before publishing anything.
	if _, err := c.Inspect(ctx, r.Session, r.CallID); err != nil {
		if errors.Is(err, schema.ErrUnknownCall) || errors.Is(err, schema.ErrSupersededCall) {
			return rc, err
		}
	}
	ack, err := c.publishReview(ctx, r)
	if err != nil {
		return rc, err
	}
	rc.Stream, rc.Seq = ack.Stream, ack.Sequence

	// How the recovery worker judges the review: the same check prepare
	// applies (well formed, its session, a trusted signer, no conflict).
	if st, err := c.Status(ctx, StatusRequest{Session: r.Session, CallID: r.CallID}); err == nil {
		for i := range st.Reviews {
			if st.Reviews[i].Seq == ack.Sequence {
				rc.Check = &st.Reviews[i]
			}
		}
	}
	if ch := rc.Check; ch != nil && !ch.Accepted {
		return rc, schema.Errorf(schema.Code(ch.Code), "review published (%s seq %d) but the recovery worker ignores it: %s", ack.Stream, ack.Sequence, ch.Reason)
	}
	// What the recovery worker makes of the call now. The assessment is
	// the history's classification; the review is applied when a plan is
	// prepared.
	a, err := c.Inspect(ctx, r.Session, r.CallID)
	if err != nil {
		rc.InspectErr = err
	} else {
		rc.Assessment = &a
	}
	return rc, nil
}

// publishReview publishes r and waits for the acknowledgement.
func (c *Client) publishReview(ctx context.Context, r schema.Review) (*jetstream.PubAck, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	id, err := ReviewMsgID(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	subj := stream.ReviewsSubject(c.prefix, r.Session)
	var ack *jetstream.PubAck
	err = c.Guard(ctx, []string{subj}, func(ctx context.Context) error {
		var err error
		ack, err = js.Publish(ctx, subj, b, jetstream.WithMsgID(id))
		return err
	})
	if schema.CodeOf(err) == schema.CodePermissionDenied {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("publish review on %s: %w (does the topology exist? start 'jingwei serve' or 'jingwei recover')", subj, err)
	}
	return ack, nil
}
