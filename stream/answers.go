package stream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// answerMsgID is the Nats-Msg-Id of the answer to a request: the same for
// every worker that answers it, so an answer is stored once per dedup
// window however often the request is delivered.
func answerMsgID(session, requestID string) string { return scopedID("answer.", session, requestID) }

// RequestMsgID is the Nats-Msg-Id a tool request is published with on
// jw.requests.<session> (docs/protocol.md §12):
// "request.<session>.<first 16 bytes of sha256(request_id), hex>". Request
// ids are the agent's and count per session (its log, its answers), while
// JW_REQUESTS deduplicates Msg-Ids across all sessions: the bare request id
// made r-1 of one session a duplicate of r-1 of another, dropped without a
// call or an answer. The id is hashed (it may be 1,024 bytes of anything).
func RequestMsgID(session, requestID string) string {
	return scopedID("request.", session, requestID)
}

// scopedID is kind + session + "." + the hex of the first 16 bytes of
// sha256(requestID).
func scopedID(kind, session, requestID string) string {
	h := sha256.Sum256([]byte(requestID))
	return kind + session + "." + hex.EncodeToString(h[:16])
}

// PublishAnswer records the answer to a tool request that could not become
// a call on jw.answers.<session> (JW_ANSWERS), with a Msg-Id derived from
// session and request id. It waits for JetStream's acknowledgement.
func (t *Topology) PublishAnswer(ctx context.Context, a schema.Answer) error {
	if err := ValidateSession(a.Session); err != nil {
		return err
	}
	a.V = schema.Version
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(t.AnswersSubject(a.Session))
	msg.Data = b
	ack, err := t.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(answerMsgID(a.Session, a.RequestID)))
	if err != nil {
		return fmt.Errorf("stream: answer request %q of %s: %w", a.RequestID, a.Session, err)
	}
	if ack.Stream != t.Answers.CachedInfo().Config.Name {
		return fmt.Errorf("stream: answer request %q of %s: %w: from stream %q", a.RequestID, a.Session, errForeignAck, ack.Stream)
	}
	return nil
}

// FindAnswer returns the answer recorded for requestID in session (the
// first one; ok false if none), read from JW_ANSWERS with the leader's
// tail and direct gets.
func (t *Topology) FindAnswer(ctx context.Context, session, requestID string) (schema.Answer, bool, error) {
	if err := ValidateSession(session); err != nil {
		return schema.Answer{}, false, err
	}
	found := errors.New("found")
	var out schema.Answer
	err := t.ReadSubject(ctx, t.Answers.CachedInfo().Config.Name, t.AnswersSubject(session), func(m *jetstream.RawStreamMsg) error {
		var a schema.Answer
		if schema.Unmarshal(m.Data, &a) != nil || a.Session != session || a.RequestID != requestID {
			return nil
		}
		out = a
		return found
	})
	switch {
	case errors.Is(err, found):
		return out, true, nil
	case err != nil:
		return schema.Answer{}, false, err
	}
	return schema.Answer{}, false, nil
}
