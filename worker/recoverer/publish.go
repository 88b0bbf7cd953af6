package recoverer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// HeaderAssessmentID carries an assessment's identity,
// "a.<session>.<call_id>.<evidence>": the same for the same assessment from
// any recoverer, so consumers can drop repeats (a redelivery after a
// crash, several recoverers). A message that carries a batch of
// assessments (schema.DecodeAssessments) has one value of the header per
// assessment, in the batch's order (nats.Header.Values): count call
// outcomes by those values, not by messages. Assessments of calls closed
// by a fence, and those a takeover publishes, are single messages with
// their id also as Nats-Msg-Id; the classifier's assessments of results
// are batched per session and published without it, because
// server-side dedup costs a third of its throughput (a redelivery after
// a crash may repeat those: count them by this header).
const HeaderAssessmentID = "Jw-Assessment-Id"

// publisher publishes assessments on jw.assessments.<session> (async for
// the classifier, see asyncAcks and batches; sync after a load) and, for
// the issuer, any message with a Msg-Id (publishSync). Every assessment is
// passed to noted when it is handed to the publish (a batched one when it
// joins its batch).
type publisher struct {
	*base
	noted func(schema.Assessment)
}

func newPublisher(b *base, noted func(schema.Assessment)) (*publisher, error) {
	return &publisher{base: b, noted: noted}, nil
}

// pending is an async publish in flight (asyncAcks).
type pending struct {
	msg *nats.Msg
	id  string
	n   uint64 // its number: the reply subject's last token
	// reconnects is the connection's reconnect count at the publish.
	reconnects uint64
}

// assessmentMsg builds the message of an assessment; its Msg-Id makes the
// same assessment from several recoverers, or after a redelivery, one
// message.
func (p *publisher) assessmentMsg(a schema.Assessment) (msg *nats.Msg, id string) {
	id = a.ID()
	// The header map is made with its one member (HeaderAssessmentID is
	// in canonical form): NewMsg's empty map grown by Set was a sixth of
	// the classifier's allocations.
	msg = &nats.Msg{Subject: p.t.Names().AssessmentsSubject(a.Session), Header: nats.Header{HeaderAssessmentID: []string{id}}}
	// The contract comes from a decoded event, so its effect is valid:
	// the only error AppendAssessment has cannot happen.
	msg.Data, _ = schema.AppendAssessment(make([]byte, 0, 256), &a)
	return msg, id
}

// publishAsync publishes an assessment with acks, without waiting for its
// ack (acks.settleThrough waits), and returns the publish's number. With
// dedup its id is also the Nats-Msg-Id: for the assessments of calls
// closed by a fence, which a storm publishes by the thousand and a
// redelivery after a crash would repeat.
func (p *publisher) publishAsync(ctx context.Context, acks *asyncAcks, a schema.Assessment, dedup bool) (uint64, error) {
	msg, id := p.assessmentMsg(a)
	tracing.Inject(ctx, msg.Header) // headers only: the assessment's bytes are the same
	n, err := acks.publish(ctx, msg, id, dedup)
	if err != nil {
		return 0, err
	}
	p.noted(a)
	return n, nil
}

// publishSync publishes msg with Msg-Id id, retrying transport errors with
// backoff until ctx ends.
func (p *publisher) publishSync(ctx context.Context, msg *nats.Msg, id string) error {
	_, err := p.publishAcked(ctx, msg, id)
	return err
}

// publishAcked is publishSync returning the server's acknowledgement: for
// a Msg-Id the server already holds, Duplicate set and the sequence of the
// message first published with it (a racing publication of the same id
// still being stored is found as its duplicate a moment later).
func (p *publisher) publishAcked(ctx context.Context, msg *nats.Msg, id string) (*jetstream.PubAck, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 20*time.Millisecond, 2*time.Second, 30*time.Second
	var ack *jetstream.PubAck
	err := backoff.Retry(func() error {
		m := nats.NewMsg(msg.Subject)
		m.Data = msg.Data
		tracing.Inject(ctx, m.Header) // headers only: a plan's signed bytes are the same
		for k, v := range msg.Header {
			if k != jetstream.MsgIDHeader {
				m.Header[k] = v
			}
		}
		a, err := p.t.JS.PublishMsg(ctx, m, jetstream.WithMsgID(id))
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

// publishRetryable reports whether a publish with a Msg-Id may be sent
// again: any failure but a refusal by the server, and of those the ones
// that pass (stream.Transient), among them 10158: a racing publisher's
// message with the same id still being stored, which a re-send a moment
// later finds as its duplicate. Found by jingwei chaos on a cluster: three
// concurrent prepares republishing one plan, one answered internal.
func publishRetryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return stream.Transient(err)
	}
	return true
}

// publishAssessment publishes one assessment synchronously.
func (p *publisher) publishAssessment(ctx context.Context, a schema.Assessment) error {
	msg, id := p.assessmentMsg(a)
	if err := p.publishSync(ctx, msg, id); err != nil {
		return fmt.Errorf("publish assessment of %s/%s: %w", a.Session, a.CallID, err)
	}
	p.noted(a)
	return nil
}

// publishOpen inspects each of the calls of the confirmed history h and
// publishes its assessment synchronously; it returns the assessments. A
// call that cannot be assessed is logged and skipped.
func (p *publisher) publishOpen(ctx context.Context, session string, h []schema.Event, calls []string) ([]schema.Assessment, error) {
	var out []schema.Assessment
	for _, id := range calls {
		a, err := inspect(h, id)
		if errors.Is(err, schema.ErrApprovalPending) {
			continue // waits for approval: no fence closed it (docs/protocol.md §17)
		}
		if err != nil {
			p.log.Warn().Err(err).Str("session", session).Str("call_id", id).Msg("call not assessed after takeover")
			continue
		}
		if err := p.publishAssessment(ctx, a); err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

// inspect classifies callID in the loaded history h.
func inspect(h []schema.Event, callID string) (schema.Assessment, error) {
	return recovery.Inspect(schema.Events(h), callID)
}
