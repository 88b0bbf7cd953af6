package stream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jingwei/jingwei/schema"
)

// Approvals is the handle on approval requests. Get it with
// Topology.Approvals.
type Approvals struct{ t *Topology }

// JW_APPROVALS (docs/protocol.md §3, §17) keeps approval requests and the
// signed approvals and denials that answer them, as an audit trail: like
// JW_REVIEWS it denies deletes and purges. Its subjects are
// jw.approvals.<session> (answers, published by approvers: the reviewer
// role), jw.approvals.<session>.request (requests, published by tool
// workers) and jw.approvals.<session>.stop (task stops, published by
// hosts; the owner of the session records them as task.stopped).

// approvalsSpec is the stream spec of JW_APPROVALS (a hook of
// streamSpecs).
func (c TopologyConfig) approvalsSpec() jetstream.StreamConfig {
	p := c.Prefix
	return jetstream.StreamConfig{
		Name:        streamName(p, "APPROVALS"),
		Description: "jingwei approval requests, approvals and denials (audit trail)",
		Subjects:    []string{p + ".approvals.*", p + ".approvals.*.request", p + ".approvals.*.stop"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		Discard:     jetstream.DiscardOld,
	}
}

// ApprovalsSubject returns <prefix>.approvals.<session>, for an approver
// with a connection and a prefix but no topology (DefaultPrefix when
// prefix is "").
func ApprovalsSubject(prefix, session string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ".approvals." + session
}

// ApprovalMsgID is the Nats-Msg-Id of an approval: one per call, decision
// and signature, so an approval published twice is stored once per dedup
// window (a replay after it is refused by the worker all the same).
func ApprovalMsgID(a schema.Approval) string {
	sig := a.Sig
	if len(sig) > 43 {
		sig = sig[:43]
	}
	return "approval." + a.Session + "." + a.CallID + "." + string(a.Decision) + "." + sig
}

// PublishApproval publishes a signed approval on jw.approvals.<session>
// with js (an approver's connection: no topology needed) and waits for
// JetStream's acknowledgement; the ack must come from the approvals
// stream of prefix.
func PublishApproval(ctx context.Context, js jetstream.JetStream, prefix string, a schema.Approval) error {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidateSession(a.Session); err != nil {
		return err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(ApprovalsSubject(prefix, a.Session))
	msg.Data = b
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(ApprovalMsgID(a)))
	if err != nil {
		return fmt.Errorf("stream: publish approval of %s/%s: %w", a.Session, a.CallID, err)
	}
	if ack.Stream != streamName(prefix, "APPROVALS") {
		return fmt.Errorf("stream: publish approval of %s/%s: %w: from stream %q", a.Session, a.CallID, errForeignAck, ack.Stream)
	}
	return nil
}

// PublishApprovalRequest records that a call waits for approval on
// jw.approvals.<session>.request (Msg-Id ask.<session>.<call_id>: once
// per call, however often a new owner re-publishes it).
func (ap Approvals) PublishApprovalRequest(ctx context.Context, a schema.AskedApproval) error {
	t := ap.t
	if err := ValidateSession(a.Session); err != nil {
		return err
	}
	a.V = schema.Version
	if a.At.IsZero() {
		a.At = time.Now().UTC()
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(t.Names().ApprovalRequestsSubject(a.Session))
	msg.Data = b
	ack, err := t.JS.PublishMsg(ctx, msg, jetstream.WithMsgID("ask."+a.Session+"."+a.CallID))
	if err != nil {
		return fmt.Errorf("stream: approval request of %s/%s: %w", a.Session, a.CallID, err)
	}
	if ack.Stream != t.ApprovalLog.CachedInfo().Config.Name {
		return fmt.Errorf("stream: approval request of %s/%s: %w: from stream %q", a.Session, a.CallID, errForeignAck, ack.Stream)
	}
	return nil
}

// StopSubject returns <prefix>.approvals.<session>.stop, where a host
// publishes a task stop (DefaultPrefix when prefix is "").
func StopSubject(prefix, session string) string { return ApprovalsSubject(prefix, session) + ".stop" }

// StopMsgID is the Nats-Msg-Id of a task stop whose message body is
// data: stop.<session>.<task>.<digest>, the digest the first 16 bytes of
// data's SHA-256 in hex. A stop published twice with the same content is
// stored once; a stop with other content (another reason, another time) is
// another message.
func StopMsgID(session, task string, data []byte) string {
	sum := sha256.Sum256(data)
	return "stop." + session + "." + task + "." + hex.EncodeToString(sum[:16])
}

// PublishStop publishes a task stop on jw.approvals.<session>.stop with js
// (a host's connection) and waits for JetStream's acknowledgement. The
// tool worker that owns (or takes) the session records it as task.stopped
// on the session log. The stop's Nats-Msg-Id is StopMsgID of its content,
// so the same stop published twice is stored once. A duplicate
// acknowledgement counts only if the message stored under the id has the
// stop's subject and exactly its bytes: anything else (another client of
// the host or reviewer role took the id first) is not this stop, which is
// published once more under an id nobody can have taken (a second stop of
// a task changes nothing). PublishStop then returns the acknowledgement of
// the stop it stored together with a request_conflict error that says so.
func PublishStop(ctx context.Context, js jetstream.JetStream, prefix string, s schema.StopRequest) (*jetstream.PubAck, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidateSession(s.Session); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	subj, id := StopSubject(prefix, s.Session), StopMsgID(s.Session, s.Task, b)
	var taken uint64 // the sequence of another message under the stop's id
	for try := 0; ; try++ {
		ack, err := js.Publish(ctx, subj, b, jetstream.WithMsgID(id))
		if err != nil {
			return nil, fmt.Errorf("stream: publish stop of %s/%s: %w", s.Session, s.Task, err)
		}
		if ack.Stream != streamName(prefix, "APPROVALS") {
			return nil, fmt.Errorf("stream: publish stop of %s/%s: %w: from stream %q", s.Session, s.Task, errForeignAck, ack.Stream)
		}
		if !ack.Duplicate {
			if taken != 0 {
				return ack, schema.Errorf(schema.CodeRequestConflict, "stop of %s/%s: another message (JW_APPROVALS seq %d) held the stop's Msg-Id %s; the stop was published again (seq %d)", s.Session, s.Task, taken, StopMsgID(s.Session, s.Task, b), ack.Sequence)
			}
			return ack, nil
		}
		// JW_APPROVALS deduplicates over the whole stream, and the id can
		// be computed by anyone who can guess the stop: a duplicate is
		// this stop only if the message stored under the id is byte for
		// byte this stop on this subject.
		st, err := js.Stream(ctx, streamName(prefix, "APPROVALS"))
		if err != nil {
			return nil, fmt.Errorf("stream: publish stop of %s/%s: check duplicate: %w", s.Session, s.Task, err)
		}
		m, err := st.GetMsg(ctx, ack.Sequence)
		if err != nil {
			return nil, fmt.Errorf("stream: publish stop of %s/%s: check duplicate: %w", s.Session, s.Task, err)
		}
		if m.Subject == subj && bytes.Equal(m.Data, b) {
			return ack, nil
		}
		if try > 0 {
			return nil, schema.Errorf(schema.CodeRequestConflict, "stop of %s/%s: the Msg-Ids %s and %s are both held by other messages; the stop is not recorded", s.Session, s.Task, StopMsgID(s.Session, s.Task, b), id)
		}
		taken = ack.Sequence
		id += "." + nuid.Next()
	}
}
