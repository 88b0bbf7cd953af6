package recoverer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// TestAckState: only a PubAck with a sequence and no error counts as
// stored; an error reply (also one naming a stream), a 503 and anything
// unreadable do not.
func TestAckState(t *testing.T) {
	status := func(code string) nats.Header { return nats.Header{"Status": []string{code}} }
	for _, c := range []struct {
		data string
		hdr  nats.Header
		want uint64
	}{
		{`{"stream":"JW_ASSESSMENTS","seq":12}`, nil, ackStored},
		{`{"stream":"JW_ASSESSMENTS","seq":12,"duplicate":true}`, nil, ackStored},
		{`{"stream":"error","domain":"hub","seq":3}`, nil, ackStored},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, nil, ackRefused},
		{`{"stream":"JW_ASSESSMENTS","error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}`, nil, ackRefused},
		{`{"stream":"JW_ASSESSMENTS"}`, nil, ackRefused},
		{`garbage`, nil, ackRefused},
		{``, status("503"), ackNoStream},
		{``, status("408"), ackRefused},
		{``, nil, ackRefused},
	} {
		if got := ackState(&nats.Msg{Data: []byte(c.data), Header: c.hdr}); got != c.want {
			t.Errorf("ackState(%q, %v) = %d, want %d", c.data, c.hdr, got, c.want)
		}
	}
}

// ackFixture is a publisher and its async acks on a fresh server.
func ackFixture(t *testing.T) (*env, *publisher, *asyncAcks) {
	t.Helper()
	e := setup(t, 0)
	r := e.recoverer("a")
	acks, err := r.pub.newAsyncAcks()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acks.close)
	return e, r.pub, acks
}

func ackAssessment(i int) schema.Assessment {
	id := fmt.Sprintf("c-%d", i)
	return schema.Assessment{Session: "s-1", CallID: id, Tool: "orders.create", Task: "t-1", Key: "k-" + id,
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "v1"}, Outcome: schema.OutcomeCompleted, Evidence: "ok",
		Decision: schema.DecisionRefuse, Attempts: 1, Chain: []string{id}}
}

func storedAssessments(t *testing.T, e *env) uint64 {
	t.Helper()
	info, err := e.topo.Assessments.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestAsyncAcksBoundedAndStored: many more publishes than maxInFlight
// without a settle keep at most maxInFlight unsettled (the oldest are
// settled first), and once settled every one is stored exactly once.
func TestAsyncAcksBoundedAndStored(t *testing.T) {
	e, p, acks := ackFixture(t)
	ctx := context.Background()
	const n = 3*maxInFlight + 7
	var last uint64
	for i := range n {
		var err error
		if last, err = p.publishAsync(ctx, acks, ackAssessment(i), i%2 == 0); err != nil {
			t.Fatal(err)
		}
		if open := len(acks.queue) - acks.head; open > maxInFlight {
			t.Fatalf("%d publishes unsettled, want at most %d", open, maxInFlight)
		}
	}
	if err := acks.settleThrough(ctx, last); err != nil {
		t.Fatal(err)
	}
	if acks.head != len(acks.queue) {
		t.Fatalf("%d publishes left unsettled after settling the last", len(acks.queue)-acks.head)
	}
	if got := storedAssessments(t, e); got != n {
		t.Fatalf("%d assessments stored, want %d", got, n)
	}
}

// TestAsyncAcksRefusedIsNotStored: a publish the stream refuses is not
// taken for stored: it is sent again, and a refusal for good is the
// settle's error (the events are not acknowledged).
func TestAsyncAcksRefusedIsNotStored(t *testing.T) {
	_, p, acks := ackFixture(t)
	ctx := context.Background()
	msg, id := p.assessmentMsg(ackAssessment(1))
	msg.Header.Set(jetstream.ExpectedLastSeqHeader, "999999") // refused: wrong last sequence
	n, err := acks.publish(ctx, msg, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := acks.settleThrough(ctx, n); err == nil {
		t.Fatal("settleThrough of a refused publish returned nil, want the refusal")
	}
}

// TestAsyncAcksLostAckResent: an ack that never comes (here: nobody
// listens on the inbox) does not hold the classifier forever nor count as
// stored: after ackTimeout the assessment is re-sent with its id as
// Nats-Msg-Id, so a fence assessment (published with it) is stored once.
func TestAsyncAcksLostAckResent(t *testing.T) {
	e, p, acks := ackFixture(t)
	ctx := context.Background()
	acks.close() // the acks go nowhere
	acks.ackTimeout = 300 * time.Millisecond
	n, err := p.publishAsync(ctx, acks, ackAssessment(1), true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := acks.settleThrough(ctx, n); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("settled after %s without an ack, want the ack timeout first", d)
	}
	if got := storedAssessments(t, e); got != 1 {
		t.Fatalf("%d assessments stored, want 1 (the re-send deduplicated)", got)
	}
}

// TestAsyncAcksLateAckIgnored: an ack for a publish that was given up on
// (re-sent) cannot mark the publish now using its slot as stored.
func TestAsyncAcksLateAckIgnored(t *testing.T) {
	_, _, acks := ackFixture(t)
	n := uint64(5)
	slot := &acks.slots[n%uint64(len(acks.slots))]
	next := n + uint64(len(acks.slots))
	slot.Store(next<<2 | ackWaiting) // the slot now belongs to a later publish
	acks.handle(&nats.Msg{Subject: acks.prefix + fmt.Sprint(n), Data: []byte(`{"stream":"JW_ASSESSMENTS","seq":1}`)})
	if v := slot.Load(); v != next<<2|ackWaiting {
		t.Fatalf("late ack of %d changed the slot of %d: %x", n, next, v)
	}
}

// TestAsyncAcksFenceAssessmentDeduplicated: an assessment published with
// dedup (a call closed by a fence) carries its id as Nats-Msg-Id, so the
// same assessment published again (a redelivery, a second recoverer) is
// stored once; without dedup (a result's) both are stored, told apart by
// HeaderAssessmentID.
func TestAsyncAcksFenceAssessmentDeduplicated(t *testing.T) {
	e, p, acks := ackFixture(t)
	ctx := context.Background()
	// publishTwice publishes assessment c-<n> twice, with dedup or
	// without, and waits until both are settled.
	publishTwice := func(n int, dedup bool) {
		t.Helper()
		var last uint64
		for range 2 {
			var err error
			if last, err = p.publishAsync(ctx, acks, ackAssessment(n), dedup); err != nil {
				t.Fatal(err)
			}
		}
		if err := acks.settleThrough(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	publishTwice(1, true)
	if got := storedAssessments(t, e); got != 1 {
		t.Fatalf("fence assessment published twice stored %d times, want 1", got)
	}
	publishTwice(2, false)
	if got := storedAssessments(t, e); got != 3 {
		t.Fatalf("%d assessments stored, want 3", got)
	}
	m, err := e.topo.Assessments.GetLastMsgForSubject(ctx, e.topo.Names().AssessmentsSubject("s-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(HeaderAssessmentID); got != "a.s-1.c-2.ok" {
		t.Fatalf("%s = %q, want a.s-1.c-2.ok", HeaderAssessmentID, got)
	}
}
