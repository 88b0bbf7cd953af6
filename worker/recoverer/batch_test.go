package recoverer

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// storedMsg is one message of JW_ASSESSMENTS as a reader reads it.
type storedMsg struct {
	seq     uint64
	subject string
	data    []byte
	ids     []string // the Jw-Assessment-Id values
	msgID   string   // Nats-Msg-Id
	members []schema.Assessment
}

// storedMsgs reads every message of JW_ASSESSMENTS in stream order, each
// decoded with schema.DecodeAssessments (a failure fails the test).
func storedMsgs(t *testing.T, e *env) []storedMsg {
	t.Helper()
	ctx := context.Background()
	info, err := e.topo.Assessments.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := e.topo.Assessments.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		as, err := schema.DecodeAssessments(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		out = append(out, storedMsg{seq: seq, subject: m.Subject, data: m.Data, ids: m.Header.Values(HeaderAssessmentID), msgID: m.Header.Get(jetstream.MsgIDHeader), members: as})
	}
	return out
}

// TestBatchesAsTheContractSays: the classifier's batches of results, as
// stored: one message per session (the object for one assessment, an
// array for more, byte for byte schema.AppendAssessments of its members),
// each session's members in the order they were added, one
// Jw-Assessment-Id value per member in that order, never more than
// maxBatchAssessments nor maxBatchBytes, a batch with its id of its bytes
// as Nats-Msg-Id and a single assessment with none (as before batches).
func TestBatchesAsTheContractSays(t *testing.T) {
	e, p, acks := ackFixture(t)
	ctx := context.Background()
	b := newBatches(p)
	var added []schema.Assessment
	add := func(a schema.Assessment) {
		t.Helper()
		added = append(added, a)
		if _, err := b.add(ctx, acks, &a); err != nil {
			t.Fatal(err)
		}
	}
	// s-1: many small ones (the count bound); s-2: big ones (the byte
	// bound); s-3: one (the single form); interleaved.
	for i := range 2*maxBatchAssessments + 40 {
		add(ackAssessment(i))
		if i%10 == 0 {
			a := ackAssessment(i)
			a.Session, a.Key = "s-2", strings.Repeat("k", 1000)+fmt.Sprint(i)
			add(a)
		}
	}
	one := ackAssessment(7)
	one.Session = "s-3"
	add(one)
	last, err := b.flush(ctx, acks)
	if err != nil {
		t.Fatal(err)
	}
	if err := acks.settleThrough(ctx, last); err != nil {
		t.Fatal(err)
	}
	if b.n != 0 || len(b.index) != 0 {
		t.Fatalf("batches not empty after a flush: %d groups", b.n)
	}
	msgs := storedMsgs(t, e)
	got := map[string][]schema.Assessment{}
	for _, m := range msgs {
		session := strings.TrimPrefix(m.subject, "jw.assessments.")
		if len(m.members) > maxBatchAssessments || len(m.data) > maxBatchBytes {
			t.Errorf("message %d: %d assessments, %d bytes; bounds %d and %d", m.seq, len(m.members), len(m.data), maxBatchAssessments, maxBatchBytes)
		}
		want, err := schema.AppendAssessments(nil, m.members)
		if err != nil || string(want) != string(m.data) {
			t.Errorf("message %d is not schema.AppendAssessments of its members (%v)", m.seq, err)
		}
		if len(m.ids) != len(m.members) {
			t.Fatalf("message %d: %d assessments, %d ids", m.seq, len(m.members), len(m.ids))
		}
		for i, a := range m.members {
			if a.Session != session || m.ids[i] != a.ID() {
				t.Errorf("message %d member %d: %s/%s with id %s", m.seq, i, a.Session, a.CallID, m.ids[i])
			}
		}
		switch {
		case len(m.members) == 1 && m.msgID != "":
			t.Errorf("message %d: a single assessment of a result with Nats-Msg-Id %q", m.seq, m.msgID)
		case len(m.members) > 1 && (m.msgID != batchMsgID(&nats.Msg{Data: m.data, Header: nats.Header{HeaderAssessmentID: m.ids}}) || !strings.HasPrefix(m.msgID, fmt.Sprintf("b.%d.", len(m.members)))):
			t.Errorf("message %d: batch Nats-Msg-Id %q", m.seq, m.msgID)
		}
		got[session] = append(got[session], m.members...)
	}
	want := map[string][]schema.Assessment{}
	for _, a := range added {
		want[a.Session] = append(want[a.Session], a)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored per session differs from added (order or members)")
	}
	// The bounds were reached: s-1 needed three messages, s-2 several.
	count := map[string]int{}
	for _, m := range msgs {
		count[m.subject]++
	}
	if count["jw.assessments.s-1"] != 3 || count["jw.assessments.s-2"] < 2 || count["jw.assessments.s-3"] != 1 {
		t.Errorf("messages per session %v, want 3 for s-1 (count bound), 2+ for s-2 (byte bound), 1 for s-3", count)
	}
}

// TestBatchLostAckStoredOnce: a batch whose ack never comes (nobody
// listens on the inbox) is not taken for stored: after ackTimeout it is
// re-sent, the same bytes, and its Nats-Msg-Id (sent from the first
// publish) makes the re-send a duplicate: the batch is stored once.
func TestBatchLostAckStoredOnce(t *testing.T) {
	e, p, acks := ackFixture(t)
	ctx := context.Background()
	acks.close() // the acks go nowhere
	acks.ackTimeout = 300 * time.Millisecond
	b := newBatches(p)
	for i := range 3 {
		a := ackAssessment(i)
		if _, err := b.add(ctx, acks, &a); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.flush(ctx, acks)
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
	msgs := storedMsgs(t, e)
	if len(msgs) != 1 || len(msgs[0].members) != 3 {
		t.Fatalf("stored %d messages (%+v), want the batch of 3 once", len(msgs), msgs)
	}
}

// TestBatchedAssessmentsStoredBeforeAcked: while JW_ASSESSMENTS refuses
// new messages (full, discard new), the classifier's batch is not stored
// and the events it came from are not acknowledged; once the stream takes
// messages again the batch is stored and only then are they.
func TestBatchedAssessmentsStoredBeforeAcked(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	st := e.topo.Assessments
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	if _, err := e.topo.JS.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	// The one message the stream holds: now it is full.
	if _, err := e.topo.JS.Publish(ctx, e.topo.Names().AssessmentsSubject("s-other"), []byte(okAssessmentJSON(t))); err != nil {
		t.Fatal(err)
	}
	w := e.writer("s-1", "w1")
	for i := range 5 {
		id := fmt.Sprintf("c-%d", i)
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusOK, "")
	}
	e.run(e.recoverer("a"))
	// Refused: nothing acknowledged, for as long as the refusal lasts.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		c, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("EVENTS"), "jw-recoverer-a-events")
		if err == nil && c.CachedInfo().AckFloor.Stream > 0 {
			t.Fatalf("events acknowledged (floor %d) while their assessments could not be stored", c.CachedInfo().AckFloor.Stream)
		}
		time.Sleep(streamtest.PollInterval)
	}
	// The classifier had the events (delivered, not acknowledged) and
	// stored nothing of them.
	c, err := e.topo.JS.Consumer(ctx, e.topo.Names().StreamName("EVENTS"), "jw-recoverer-a-events")
	if err != nil {
		t.Fatal(err)
	}
	if info := c.CachedInfo(); info.Delivered.Stream < 15 || info.AckFloor.Stream != 0 {
		t.Fatalf("consumer delivered through %d, ack floor %d; want every event delivered and none acknowledged", info.Delivered.Stream, info.AckFloor.Stream)
	}
	if n := len(storedMsgs(t, e)); n != 1 {
		t.Fatalf("%d messages in the full stream, want the 1 it held", n)
	}
	if _, err := e.topo.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, e, "a", 15)
	msgs := storedMsgs(t, e)
	var members []string
	for _, m := range msgs[1:] {
		for _, a := range m.members {
			members = append(members, a.CallID)
		}
	}
	sort.Strings(members)
	if !reflect.DeepEqual(members, []string{"c-0", "c-1", "c-2", "c-3", "c-4"}) {
		t.Fatalf("stored %v after the stream took messages again, want every call once", members)
	}
}

// TestFencedAssessmentAfterItsSessionBatch: a session's results (batched)
// and then a fence that closes its open call: the fence's assessment is a
// single message with its id as Nats-Msg-Id, stored after the batch of the
// results before it in the log, so the session's assessments are in log
// order.
func TestFencedAssessmentAfterItsSessionBatch(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 0)
	w := e.writer("s-f", "w1")
	for _, id := range []string{"c-1", "c-2", "c-3"} {
		w.call(id, "orders.create", effect.Idempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusOK, "")
	}
	w.call("c-open", "payments.charge", effect.NonIdempotent, "k-open")
	w.started("c-open")
	if err := w.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := e.topo.Leases().AcquireLease(ctx, "s-f", "w2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.topo.Logs().Fence(ctx, "s-f", "w2", lease.Epoch); err != nil {
		t.Fatal(err)
	}
	// Everything is in the log before the classifier starts: it is
	// delivered in one go, the results grouped.
	e.run(e.recoverer("a"))
	waitAcked(t, e, "a", 12)
	msgs := storedMsgs(t, e)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want the batch of results and the fence's single", len(msgs))
	}
	if b := msgs[0]; len(b.members) != 3 || b.members[0].CallID != "c-1" || b.members[2].CallID != "c-3" || !strings.HasPrefix(string(b.data), "[") {
		t.Errorf("first message %s, want the batch of c-1..c-3", b.data)
	}
	f := msgs[1]
	if len(f.members) != 1 || f.members[0].CallID != "c-open" || f.data[0] != '{' || f.msgID != f.members[0].ID() || f.members[0].Decision != schema.DecisionNeedsReview {
		t.Errorf("second message %s (Msg-Id %q), want the fence's single assessment of c-open with its id as Msg-Id", f.data, f.msgID)
	}
}

// TestStatusRebuiltFromBatches: calls awaiting review whose assessments
// were stored in batches are listed again after a restart (same name, and
// a fresh recoverer reading everything again), and a later assessment of
// a call in a batch (in log order) decides.
func TestStatusRebuiltFromBatches(t *testing.T) {
	e := setup(t, 0)
	w := e.writer("s-b", "w1")
	var want []string
	for i := range 6 {
		id := fmt.Sprintf("pay-%d", i)
		w.call(id, "payments.charge", effect.NonIdempotent, "k-"+id)
		w.started(id)
		w.result(id, schema.StatusFailed, "") // needs_review
		want = append(want, "s-b/"+id)
	}
	w.call("ok-1", "orders.create", effect.Idempotent, "k-ok")
	w.started("ok-1")
	w.result("ok-1", schema.StatusOK, "")
	first := e.recoverer("a")
	stop := e.run(first)
	waitAcked(t, e, "a", 21)
	batched := 0
	for _, m := range storedMsgs(t, e) {
		if len(m.members) > 1 {
			batched += len(m.members)
		}
	}
	if batched != 7 {
		t.Fatalf("%d assessments stored in batches, want all 7 (the events were there before the classifier)", batched)
	}
	stop()
	// A fresh recoverer (new consumers: it reads, and assesses,
	// everything again) lists them all once it is ready.
	fresh := e.recoverer("fresh")
	stopFresh := e.run(fresh)
	started(t, fresh)
	got := keysOf(statusView(t, fresh).AwaitingReview)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fresh: awaiting review %v, want %v", got, want)
	}
	stopFresh()
	// A later batch assesses pay-5 again as something that does not
	// await review (a forged but valid message): assessments carry no
	// signature, so the rebuild follows the session log, which says pay-5
	// failed and awaits review.
	later := ackAssessment(99)
	later.Session, later.CallID, later.Chain = "s-b", "pay-5", []string{"pay-5"}
	other := later
	other.CallID, other.Chain = "pay-x", []string{"pay-x"}
	data, err := schema.EncodeAssessments([]schema.Assessment{later, other})
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := first.pub.assessmentMsg(later)
	msg.Data, msg.Header[HeaderAssessmentID] = data, []string{later.ID(), other.ID()}
	if _, err := e.topo.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	next := e.recoverer("a")
	e.run(next)
	started(t, next)
	got = keysOf(statusView(t, next).AwaitingReview)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a: awaiting review after restart %v, want %v (the log decides, not pay-5's later assessment)", got, want)
	}
}

// okAssessmentJSON is one valid assessment message.
func okAssessmentJSON(t *testing.T) string {
	t.Helper()
	a := ackAssessment(0)
	a.Session = "s-other"
	b, err := schema.EncodeAssessment(&a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
