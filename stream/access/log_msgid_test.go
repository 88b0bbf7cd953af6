package access_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

// TestLogOwnEventIsRecognizedByContent: a writer whose append is refused
// because the tail moved reads the log, and takes a message carrying the
// Nats-Msg-Id it sent as its own event (its acknowledgement lost). Msg-Ids
// are <prefix>-<n>, the prefix readable on every event the writer stored,
// so anyone with the worker's publish right on jw.events.* — another tool
// worker's credentials and a plain nats.go client — can store the writer's
// next Msg-Id first, on another event. Here, between the call's tool.call
// and its tool.started, a forged tool.result rejected at permission: the
// writer must not take it for its tool.started (it would run the body
// while the log says the body never started, and a not_started call gets
// a retry plan: the side effect twice). The append must fail, and the
// writer's Log stop.
func TestLogOwnEventIsRecognizedByContent(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sess = "s-1"
	_, honest := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	lg, err := honest.Logs().OpenLog(ctx, sess, "tw-honest", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg.Append(ctx, schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "payments.charge", Arguments: []byte(`{"amount_cents":5}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "k-1", Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "v1"}}}}); err != nil {
		t.Fatal(err)
	}

	// The attacker: the worker's credentials, a plain client.
	nc := rs.connect(t, access.RoleWorker)
	js, _ := jetstream.New(nc)
	events, err := js.Stream(ctx, "JW_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	last, err := events.GetLastMsgForSubject(ctx, "jw.events."+sess)
	if err != nil {
		t.Fatal(err)
	}
	id := last.Header.Get(jetstream.MsgIDHeader)
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("writer's Msg-Id %q", id)
	}
	next := id[:i+1] + strconv.Itoa(n+1)
	forged := schema.Event{V: 1, Session: sess, Epoch: 2, At: time.Now().UTC(), Type: schema.TypeResult,
		Result: &schema.Result{CallID: "c-1", Status: schema.StatusRejected, Stage: schema.StagePermission, Error: "denied"}}
	body, err := schema.EncodeEvent(forged)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: "jw.events." + sess, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, next)
	msg.Header.Set(stream.HeaderEpoch, "2")
	msg.Header.Set(stream.HeaderOwner, "tw-honest")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("the worker's credentials append: %v", err)
	}

	// The honest writer records the start, which is what lets its body run.
	seq, err := lg.Append(ctx, schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}})
	h, lerr := honest.Logs().Load(ctx, sess)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if err == nil {
		a, ierr := recovery.Inspect(schema.Events(h), "c-1")
		t.Errorf("HOLE: the writer took the forged event at seq %d (Msg-Id %s) for its tool.started and would run the body; the log says %s (outcome %s, decision %s, %v): a retry plan would run it again",
			seq, next, h[len(h)-1].Type, a.Outcome, a.Decision, ierr)
	}
	if lg.Err() == nil && err != nil {
		t.Errorf("the refused append (%v) left the Log usable", err)
	}
	for _, ev := range h {
		if ev.Type == schema.TypeStarted {
			t.Errorf("tool.started recorded at seq %d after the forged event", ev.Seq)
		}
	}
}

// TestLogEventAt: a writer with the worker's permissions reads an event of
// its session log by stream sequence (what a runtime checks a plan's prior
// call with); a sequence that holds another session's message, or none,
// is not found.
func TestLogEventAt(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, w := rs.asRole(t, access.RoleWorker, stream.TopologyConfig{})
	a, err := w.Logs().OpenLog(ctx, "s-a", "tw-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Logs().OpenLog(ctx, "s-b", "tw-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	call := schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "t", Arguments: []byte(`{"x":1}`)}}
	seqA, err := a.Append(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	seqB, err := b.Append(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	ev, ok, err := a.EventAt(ctx, seqA)
	if err != nil || !ok || ev.Seq != seqA || ev.Session != "s-a" || ev.Call == nil || ev.Call.CallID != "c-1" {
		t.Fatalf("EventAt(%d) = %+v %v %v", seqA, ev, ok, err)
	}
	for _, seq := range []uint64{seqB, seqB + 10} {
		if ev, ok, err := a.EventAt(ctx, seq); err != nil || ok {
			t.Errorf("s-a EventAt(%d) = %+v %v %v, want not found", seq, ev, ok, err)
		}
	}
}
