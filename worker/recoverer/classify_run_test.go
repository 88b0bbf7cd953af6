package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// stageMsg is a delivery for the classifier's stages, alone: a subject, a
// payload, an ack reply naming the consumer and the sequences, and a
// record of its acknowledgements. The rest of jetstream.Msg is not used.
type stageMsg struct {
	jetstream.Msg
	subject, reply string
	data           []byte
	acks, doubles  int
}

func (m *stageMsg) Subject() string                     { return m.subject }
func (m *stageMsg) Reply() string                       { return m.reply }
func (m *stageMsg) Data() []byte                        { return m.data }
func (m *stageMsg) Ack() error                          { m.acks++; return nil }
func (m *stageMsg) DoubleAck(ctx context.Context) error { m.doubles++; return nil }

// delivered returns the delivery of consumer name of stream st with
// stream sequence sseq, consumer sequence cseq and pending left.
func delivered(st, name string, sseq, cseq, pending uint64, subject string, data []byte) *stageMsg {
	return &stageMsg{
		subject: subject, data: data,
		reply: fmt.Sprintf("$JS.ACK.%s.%s.1.%d.%d.%d.%d", st, name, sseq, cseq, time.Now().UnixNano(), pending),
	}
}

// stageRun is a run of a classifier without a server: its publisher and
// acks are empty, so a stage that would publish must not be reached
// except by grouping (which publishes only a full group).
func stageRun(delivered uint64) *classifyRun {
	b := &base{log: zerolog.Nop()}
	pub := &publisher{base: b, noted: func(schema.Assessment) {}}
	c := &classifier{base: b, pub: pub, track: newTracker(), delivered: delivered}
	return &classifyRun{
		c: c, acks: &asyncAcks{p: pub},
		ownStream: "JW_EVENTS", ownName: "rec-events",
		wantDelivery: delivered + 1, first: true,
		grouped: newBatches(pub),
	}
}

func TestClassifyRunAdmit(t *testing.T) {
	ctx := context.Background()
	r := stageRun(4)
	// Another consumer's delivery on the inbox: dropped, and it does not
	// count as the next delivery.
	if _, ok, err := r.admit(ctx, delivered("JW_EVENTS", "thief", 9, 5, 0, "jw.events.s-1", nil)); ok || err != nil {
		t.Fatalf("foreign delivery: ok %v, %v", ok, err)
	}
	if r.wantDelivery != 5 || !r.first {
		t.Fatalf("after a foreign delivery: want %d, first %v", r.wantDelivery, r.first)
	}
	// The first of a run may be 1 (the consumer was reset).
	if md, ok, err := r.admit(ctx, delivered("JW_EVENTS", "rec-events", 9, 1, 3, "jw.events.s-1", nil)); !ok || err != nil || md.stream != 9 || md.pending != 3 {
		t.Fatalf("first delivery after a reset: %+v %v %v", md, ok, err)
	}
	if _, ok, err := r.admit(ctx, delivered("JW_EVENTS", "rec-events", 10, 2, 2, "jw.events.s-1", nil)); !ok || err != nil {
		t.Fatalf("next delivery: %v %v", ok, err)
	}
	// But not later: 1 again is a gap (3 lost), which settles the batch
	// classified so far, confirmed, and ends the run.
	last := delivered("JW_EVENTS", "rec-events", 10, 2, 2, "jw.events.s-1", nil)
	r.cur.last = last
	_, ok, err := r.admit(ctx, delivered("JW_EVENTS", "rec-events", 11, 1, 1, "jw.events.s-1", nil))
	if ok || !errors.Is(err, errDeliveriesLost) {
		t.Fatalf("a gap: ok %v, %v", ok, err)
	}
	if last.doubles != 1 || last.acks != 0 || r.cur.last != nil {
		t.Fatalf("a gap: last event acked %d, double-acked %d; batch %+v", last.acks, last.doubles, r.cur)
	}
}

// event returns the payload of ev in session s at epoch 1.
func event(t *testing.T, s string, ev schema.Event) []byte {
	t.Helper()
	ev.V, ev.Session, ev.Epoch, ev.At = 1, s, 1, time.Now().UTC()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClassifyRunClassifyGroupsAResult(t *testing.T) {
	ctx := context.Background()
	r := stageRun(0)
	op := &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}}
	call := event(t, "s-1", schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{}`), StartMarker: true, Operation: op}})
	result := event(t, "s-1", schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK, Output: json.RawMessage(`{}`)}})
	if err := r.classify(ctx, &stageMsg{subject: "jw.events.s-1", data: call}, 1); err != nil {
		t.Fatal(err)
	}
	if r.grouped.n != 0 {
		t.Fatalf("a call grouped an assessment: %d groups", r.grouped.n)
	}
	if err := r.classify(ctx, &stageMsg{subject: "jw.events.s-1", data: result}, 2); err != nil {
		t.Fatal(err)
	}
	if r.grouped.n != 1 || len(r.grouped.groups[0].ids) != 1 || r.grouped.groups[0].session != "s-1" {
		t.Fatalf("the result's assessment is not grouped: %+v", r.grouped.groups[:r.grouped.n])
	}
	var a schema.Assessment
	if err := json.Unmarshal(r.grouped.groups[0].buf[1:], &a); err != nil || a.CallID != "c-1" || a.Outcome != schema.OutcomeCompleted {
		t.Fatalf("grouped assessment %+v, %v", a, err)
	}
	// A payload that does not decode is skipped (logged), not an error:
	// the event is acknowledged with its batch.
	if err := r.classify(ctx, &stageMsg{subject: "jw.events.s-2", data: []byte("{")}, 3); err != nil {
		t.Fatal(err)
	}
}

func TestClassifyRunAssessReady(t *testing.T) {
	r := stageRun(0)
	f := &finding{session: "s-1", callID: "c-1", a: schema.Assessment{CallID: "c-1"}, ready: true}
	a, err := r.assess(context.Background(), f, 1)
	if err != nil || a != &f.a {
		t.Fatalf("ready finding: %p %v, want its own assessment %p", a, err, &f.a)
	}
}

func TestClassifyRunAckBatches(t *testing.T) {
	ctx := context.Background()
	r := stageRun(0)
	// Events pending after it: the batch stays open.
	m1 := &stageMsg{}
	if err := r.ack(ctx, m1, 5); err != nil || r.cur.last != m1 || r.n != 1 || m1.acks != 0 {
		t.Fatalf("pending: %v, batch %+v, n %d, acks %d", err, r.cur, r.n, m1.acks)
	}
	// A full batch is left in flight as the previous one.
	r.n = ackBatch - 1
	m2 := &stageMsg{}
	if err := r.ack(ctx, m2, 5); err != nil || r.prev.last != m2 || r.cur.last != nil || r.n != 0 || m2.acks != 0 {
		t.Fatalf("full batch: %v, prev %+v cur %+v n %d acks %d", err, r.prev, r.cur, r.n, m2.acks)
	}
	// Nothing pending: both batches settled, their last events acked.
	m3 := &stageMsg{}
	if err := r.ack(ctx, m3, 0); err != nil || m2.acks != 1 || m3.acks != 1 || r.prev.last != nil || r.cur.last != nil || r.n != 0 {
		t.Fatalf("quiet: %v, acks %d %d, prev %+v cur %+v", err, m2.acks, m3.acks, r.prev, r.cur)
	}
}
