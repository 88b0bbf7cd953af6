package recoverer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/schema"
)

// Bounds of one assessment batch message (docs/protocol.md §5.4): a
// batch is published once it holds maxBatchAssessments, and never grows
// past maxBatchBytes (an assessment that would take it past starts the
// next one), far below the server's max_payload (1 MiB by default).
const (
	maxBatchAssessments = 256
	maxBatchBytes       = 64 << 10
)

// batches groups the classifier's assessments of results per session
// between two flushes (the classifier flushes before it settles the
// events they came from): every session's assessments go out as one
// message (schema.AppendAssessments' form: the object for one, an array
// for more), the server's cost of storing a message being most of what
// classification costs. A session's batch is published at once when it is
// full, and before an assessment of the same session that is published on
// its own (a call closed by a fence), so the session's assessments are
// stored in log order. Only the classifier's run goroutine uses it.
type batches struct {
	p     *publisher
	index map[string]int // session → groups[i]
	// groups[:n] are the sessions with assessments since the last flush;
	// groups[n:] are kept for reuse.
	groups []batchGroup
	n      int
}

// batchGroup is one session's batch being built: buf holds '[' and the
// members' JSON separated by commas, ids their assessment ids in the same
// order.
type batchGroup struct {
	session string
	buf     []byte
	ids     []string
}

func newBatches(p *publisher) *batches {
	return &batches{p: p, index: make(map[string]int)}
}

// add appends a (an assessment of a result) to its session's batch and
// returns the number of the publish that carries it if the batch was
// published (full), else 0.
func (b *batches) add(ctx context.Context, acks *asyncAcks, a *schema.Assessment) (uint64, error) {
	i, ok := b.index[a.Session]
	if !ok {
		i = b.n
		if i == len(b.groups) {
			b.groups = append(b.groups, batchGroup{})
		}
		b.n++
		g := &b.groups[i]
		g.session, g.ids = a.Session, g.ids[:0]
		g.buf = append(g.buf[:0], '[')
		b.index[a.Session] = i
	}
	g := &b.groups[i]
	id := a.ID()
	mark := len(g.buf)
	if len(g.ids) > 0 {
		g.buf = append(g.buf, ',')
	}
	// The contract comes from a decoded event, so its effect is valid:
	// the only error AppendAssessment has cannot happen.
	g.buf, _ = schema.AppendAssessment(g.buf, a)
	b.p.noted(*a)
	var pubN uint64
	if len(g.buf)+1 > maxBatchBytes && len(g.ids) > 0 {
		// Too big with a: the members before it go out, a starts the next
		// batch.
		member := append([]byte(nil), g.buf[mark+1:]...)
		g.buf = g.buf[:mark]
		n, err := b.publish(ctx, acks, g)
		if err != nil {
			return 0, err
		}
		pubN = n
		g.buf = append(g.buf, member...)
	}
	g.ids = append(g.ids, id)
	if len(g.ids) >= maxBatchAssessments || len(g.buf)+1 >= maxBatchBytes {
		n, err := b.publish(ctx, acks, g)
		if err != nil {
			return 0, err
		}
		pubN = n
	}
	return pubN, nil
}

// flushSession publishes session's batch, if it has one, and returns the
// publish's number (0: none).
func (b *batches) flushSession(ctx context.Context, acks *asyncAcks, session string) (uint64, error) {
	i, ok := b.index[session]
	if !ok || len(b.groups[i].ids) == 0 {
		return 0, nil
	}
	return b.publish(ctx, acks, &b.groups[i])
}

// flush publishes every session's batch and returns the number of the
// last publish (0: none); the batches are empty after it.
func (b *batches) flush(ctx context.Context, acks *asyncAcks) (uint64, error) {
	var last uint64
	for i := range b.groups[:b.n] {
		g := &b.groups[i]
		if len(g.ids) == 0 {
			continue
		}
		n, err := b.publish(ctx, acks, g)
		if err != nil {
			return 0, err
		}
		last = n
	}
	clear(b.index)
	b.n = 0
	return last, nil
}

// publish sends g's members as one message and empties g (its buffer and
// ids go with the message, which a re-send needs until it is settled).
func (b *batches) publish(ctx context.Context, acks *asyncAcks, g *batchGroup) (uint64, error) {
	data := g.buf[1:] // one: the object
	if len(g.ids) > 1 {
		data = append(g.buf, ']')
	}
	msg := &nats.Msg{Subject: b.p.t.Names().AssessmentsSubject(g.session), Header: nats.Header{HeaderAssessmentID: g.ids}, Data: data}
	// A single assessment goes out as before batches: without a
	// Nats-Msg-Id (dedup per assessment costs a third of the
	// classifier's throughput), re-sent with its id as one. A batch
	// carries an id of its bytes (batchMsgID) from the first send: one
	// dedup entry per batch is cheap, and a batch whose ack was lost, or
	// the same batch after a redelivery, is stored once.
	id, dedup := g.ids[0], false
	if len(g.ids) > 1 {
		id, dedup = batchMsgID(msg), true
	}
	n, err := acks.publish(ctx, msg, id, dedup)
	if err != nil {
		return 0, err
	}
	size := cap(g.buf)
	g.buf = make([]byte, 1, min(max(size, 512), maxBatchBytes+4096))
	g.buf[0] = '['
	g.ids = make([]string, 0, min(max(cap(g.ids), 4), maxBatchAssessments))
	return n, nil
}

// batchMsgID is a batch message's Nats-Msg-Id: "b.<count>.<sha256 of the
// message's data, 32 hex digits>.<its first assessment id>", the same for
// the same bytes (a re-send, or the same batch built again after a
// redelivery, is stored once; a batch grouped differently is another
// message, whose members readers count by their ids), and never a single
// assessment's ("a.…").
func batchMsgID(msg *nats.Msg) string {
	ids := msg.Header.Values(HeaderAssessmentID)
	sum := sha256.Sum256(msg.Data)
	first := ""
	if len(ids) > 0 {
		first = ids[0]
	}
	return "b." + strconv.Itoa(len(ids)) + "." + hex.EncodeToString(sum[:16]) + "." + first
}
