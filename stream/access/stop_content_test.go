package access_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

// stopsOn returns, read as admin, the task stops stored on the stop
// subject of session that decode to exactly want (every field).
func (rs *roleServer) stopsOn(t *testing.T, session string, want schema.StopRequest) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(rs.admin)
	subj := stream.StopSubject("", session)
	c, err := js.OrderedConsumer(ctx, "JW_APPROVALS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	total := rs.countOn(t, "JW_APPROVALS", subj)
	n := 0
	for i := uint64(0); i < total; i++ {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read stop %d of %d: %v", i+1, total, err)
		}
		var got schema.StopRequest
		if json.Unmarshal(m.Data(), &got) == nil && got == want {
			n++
		}
	}
	return n
}

// TestStopNotSuppressedByAnotherHostsMessage: another holder of the host
// role published, first, a message that is no valid stop ({"task":"t-1"}:
// the tool worker refuses it) on the stop subject under the stop's
// predictable Msg-Id. The duplicate check compared subject and task only,
// so the real stop was taken for stored: "published", and nothing the
// worker could record was there. The host's stop, with its content, must
// be stored on jw.approvals.<session>.stop.
func TestStopNotSuppressedByAnotherHostsMessage(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attacker, _ := jetstream.New(rs.connect(t, access.RoleHost))
	msg := nats.NewMsg(stream.StopSubject("", "s-1"))
	msg.Data = []byte(`{"task":"t-1"}`)
	if _, err := attacker.PublishMsg(ctx, msg, jetstream.WithMsgID("stop.s-1.t-1")); err != nil {
		t.Fatalf("the other host publishes on the stop subject: %v", err)
	}
	host, _ := jetstream.New(rs.connect(t, access.RoleHost))
	stop := schema.StopRequest{V: schema.Version, Session: "s-1", Task: "t-1", Reason: "runaway agent", At: "2026-12-02T01:00:00Z"}
	ack, err := stream.PublishStop(ctx, host, "", stop)
	if n := rs.stopsOn(t, "s-1", stop); n != 1 {
		t.Errorf("HOLE: the host's stop of t-1 is not recorded (%d stored with its content; ack %+v, err %v): another host's message under its Msg-Id took its place", n, ack, err)
	}
}

// TestStopIDTakenWithItsDigest: the stop's Msg-Id carries its content's
// digest, which anyone who can guess the stop (the CLI's time has second
// resolution) can compute. Another host publishes something else under
// exactly that id first: the host's PublishStop must say so (a
// request_conflict error) and the stop must be stored with its content
// all the same.
func TestStopIDTakenWithItsDigest(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := schema.StopRequest{V: schema.Version, Session: "s-1", Task: "t-1", Reason: "runaway agent", At: "2026-12-02T01:00:00Z"}
	b, err := json.Marshal(stop)
	if err != nil {
		t.Fatal(err)
	}
	attacker, _ := jetstream.New(rs.connect(t, access.RoleHost))
	msg := nats.NewMsg(stream.StopSubject("", "s-1"))
	msg.Data = []byte(`{"task":"t-1"}`)
	if _, err := attacker.PublishMsg(ctx, msg, jetstream.WithMsgID(stream.StopMsgID("s-1", "t-1", b))); err != nil {
		t.Fatalf("the other host publishes on the stop subject: %v", err)
	}
	host, _ := jetstream.New(rs.connect(t, access.RoleHost))
	ack, err := stream.PublishStop(ctx, host, "", stop)
	if schema.CodeOf(err) != schema.CodeRequestConflict {
		t.Errorf("PublishStop = %v, want a request_conflict error saying another message held the id", err)
	}
	if ack == nil || ack.Duplicate {
		t.Errorf("ack %+v, want the acknowledgement of the stop stored anew", ack)
	}
	if n := rs.stopsOn(t, "s-1", stop); n != 1 {
		t.Errorf("HOLE: %d stops of t-1 stored with the host's content, want 1", n)
	}
	// The same stop again, with nothing in the way of a fresh id: stored
	// once, no error.
	again := stop
	again.Reason = "still running"
	if _, err := stream.PublishStop(ctx, host, "", again); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.PublishStop(ctx, host, "", again); err != nil {
		t.Fatal(err)
	}
	if n := rs.stopsOn(t, "s-1", again); n != 1 {
		t.Errorf("a stop published twice is stored %d times, want once", n)
	}
}
