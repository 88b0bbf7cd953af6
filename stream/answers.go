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

// Answers is the handle on the answers to tool requests that could not
// become a call. Get it with Topology.Answers.
type Answers struct{ t *Topology }

// answerMsgID is the Nats-Msg-Id of the answer to a request: the same for
// every worker that answers it, so an answer is stored once per dedup
// window however often the request is delivered; another request under
// the same id (another digest) gets an answer of its own.
func answerMsgID(a schema.Answer) string {
	id := scopedID("answer.", a.Session, a.RequestID)
	if a.RequestDigest != "" {
		id += "." + a.RequestDigest
	}
	return id
}

// RequestMsgID is the session-scoped part of the Nats-Msg-Id a tool
// request is published with on jw.requests.<session> (docs/protocol.md
// §12): "request.<session>.<first 16 bytes of sha256(request_id), hex>";
// publishers use RequestMsgIDOf, which binds it to the request's content. Request
// ids are the agent's and count per session (its log, its answers), while
// JW_REQUESTS deduplicates Msg-Ids across all sessions: the bare request id
// made r-1 of one session a duplicate of r-1 of another, dropped without a
// call or an answer. The id is hashed (it may be 1,024 bytes of anything).
func RequestMsgID(session, requestID string) string {
	return scopedID("request.", session, requestID)
}

// RequestMsgIDOf is the Nats-Msg-Id a tool request is published with on
// jw.requests.<session> (docs/protocol.md §12): RequestMsgID followed by
// "." and the hex of the first 16 bytes of RequestDigest. A request id is
// bound to its content: the same request published again is a duplicate,
// while another request under the same id (another tool, task or
// arguments — an agent claiming a victim's predictable id ahead of it)
// is not taken for one, reaches the session's tool worker and is refused
// there with request_conflict instead of being dropped while its sender
// waits for the other request's result. Arguments that do not
// canonicalize (a request the worker refuses as invalid_request) are
// hashed as they are.
func RequestMsgIDOf(q schema.Request) string {
	return RequestMsgID(q.Session, q.RequestID) + "." + RequestDigestHex(q)
}

// RequestDigestHex is the hex of the first 16 bytes of q's RequestDigest:
// the last part of its Msg-Id (RequestMsgIDOf) and the request_digest of
// its answer. Arguments that do not canonicalize are hashed as they are.
func RequestDigestHex(q schema.Request) string {
	d, err := RequestDigest(q.Tool, q.Task, q.Arguments)
	if err != nil {
		d = sha256.Sum256(q.Arguments)
	}
	return hex.EncodeToString(d[:16])
}

// RequestDigest is what binds a request id to its content: the SHA-256 of
// the canonical JSON (docs/protocol.md §6.1) of the object
// {"arguments": args, "task": task, "tool": tool}. Two requests with the
// same digest ask for the same call (arguments compared as values, so
// {"a":1,"b":2} and {"b":2,"a":1.0} are the same). Errors are those of
// schema.Canonical (arguments that are not valid JSON). Safe for
// concurrent use.
func RequestDigest(tool, task string, args json.RawMessage) ([sha256.Size]byte, error) {
	obj, err := json.Marshal(struct {
		Arguments json.RawMessage `json:"arguments"`
		Task      string          `json:"task"`
		Tool      string          `json:"tool"`
	}{args, task, tool})
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("%w: %v", schema.ErrInvalidJSON, err)
	}
	c, err := schema.Canonical(obj)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(c), nil
}

// CallDigest is RequestDigest of the request a recorded tool.call
// carries: its tool, its operation's task and its arguments. A reader
// waiting for the result of request q (jw.api.call) takes a call carrying
// q's request_id for q's only if CallDigest(c) equals q's RequestDigest;
// otherwise q is another request under the same id (request_conflict).
// ok is false if the call's arguments do not canonicalize (no request
// matches it).
func CallDigest(c *schema.Call) (d [sha256.Size]byte, ok bool) {
	task := ""
	if c.Operation != nil {
		task = c.Operation.Task
	}
	d, err := RequestDigest(c.Tool, task, c.Arguments)
	return d, err == nil
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
func (an Answers) PublishAnswer(ctx context.Context, a schema.Answer) error {
	t := an.t
	if err := ValidateSession(a.Session); err != nil {
		return err
	}
	a.V = schema.Version
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(t.Names().AnswersSubject(a.Session))
	msg.Data = b
	ack, err := t.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(answerMsgID(a)))
	if err != nil {
		return fmt.Errorf("stream: answer request %q of %s: %w", a.RequestID, a.Session, err)
	}
	if ack.Stream != t.AnswerLog.CachedInfo().Config.Name {
		return fmt.Errorf("stream: answer request %q of %s: %w: from stream %q", a.RequestID, a.Session, errForeignAck, ack.Stream)
	}
	return nil
}

// FindAnswer returns the answer recorded for requestID in session (the
// first one; ok false if none), read from JW_ANSWERS with the leader's
// tail and direct gets. It may be the answer to another request under
// the same id: a reader waiting for one request uses FindAnswerFor.
func (an Answers) FindAnswer(ctx context.Context, session, requestID string) (schema.Answer, bool, error) {
	return an.findAnswer(ctx, session, requestID, "")
}

// FindAnswerFor returns the answer recorded for request q (the first
// one; ok false if none): an answer under q's session and request id
// whose request_digest is q's (RequestDigestHex), or that carries none
// (recorded before answers carried it). An answer to another request
// under the same id — another agent's, refused — is not q's.
func (an Answers) FindAnswerFor(ctx context.Context, q schema.Request) (schema.Answer, bool, error) {
	return an.findAnswer(ctx, q.Session, q.RequestID, RequestDigestHex(q))
}

// findAnswer is FindAnswer for the request with digest (any if "").
func (an Answers) findAnswer(ctx context.Context, session, requestID, digest string) (schema.Answer, bool, error) {
	t := an.t
	if err := ValidateSession(session); err != nil {
		return schema.Answer{}, false, err
	}
	found := errors.New("found")
	var out schema.Answer
	err := t.Reader().ReadSubject(ctx, t.AnswerLog.CachedInfo().Config.Name, t.Names().AnswersSubject(session), func(m *jetstream.RawStreamMsg) error {
		var a schema.Answer
		if schema.Unmarshal(m.Data, &a) != nil || a.Session != session || a.RequestID != requestID {
			return nil
		}
		if digest != "" && a.RequestDigest != "" && a.RequestDigest != digest {
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
