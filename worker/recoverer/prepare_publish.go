package recoverer

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishPlanMsg publishes data, a plan, on jw.plans.<session> with Msg-Id
// id and returns the server's acknowledgement: for a Msg-Id the server
// already holds, Duplicate set and the sequence of the message first
// published with it. Failures are retried as publisher.publishSync
// retries them (a racing publication of the same id still being stored
// is found as its duplicate a moment later).
func (r *issuer) publishPlanMsg(ctx context.Context, session string, data []byte, id string) (*jetstream.PubAck, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 20*time.Millisecond, 2*time.Second, 30*time.Second
	subj := r.t.PlansSubject(session)
	var ack *jetstream.PubAck
	err := backoff.Retry(func() error {
		m := nats.NewMsg(subj)
		m.Data = data
		a, err := r.t.JS.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		if err != nil {
			if !publishRetryable(err) {
				return backoff.Permanent(err)
			}
			return err
		}
		ack = a
		return nil
	}, backoff.WithContext(b, ctx))
	return ack, err
}
