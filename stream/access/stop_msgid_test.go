package access_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
)

// TestStopNotSuppressedByAnotherRolesMsgID: JW_APPROVALS deduplicates by
// Nats-Msg-Id over the whole stream, and a host's task stop is published
// under a predictable one (stop.<session>.<task>). The reviewer role may
// publish on jw.approvals.<session> with any headers: a message there
// under the stop's Msg-Id, stored first, made the host's PublishStop a
// duplicate — acknowledged without an error, and nothing recorded: the
// task runs on while its host believes it stopped. The host's stop must
// be stored on jw.approvals.<session>.stop all the same.
func TestStopNotSuppressedByAnotherRolesMsgID(t *testing.T) {
	rs := startRoleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reviewer, _ := jetstream.New(rs.connect(t, access.RoleReviewer))
	msg := nats.NewMsg(stream.ApprovalsSubject("", "s-1"))
	msg.Data = []byte(`{"v":1}`)
	if _, err := reviewer.PublishMsg(ctx, msg, jetstream.WithMsgID("stop.s-1.t-1")); err != nil {
		t.Fatalf("the reviewer publishes on jw.approvals.s-1: %v", err)
	}
	host, _ := jetstream.New(rs.connect(t, access.RoleHost))
	ack, err := stream.PublishStop(ctx, host, "", schema.StopRequest{V: schema.Version, Session: "s-1", Task: "t-1", Reason: "runaway agent"})
	if err != nil {
		t.Fatalf("PublishStop: %v", err)
	}
	if n := rs.countOn(t, "JW_APPROVALS", stream.StopSubject("", "s-1")); n != 1 {
		t.Errorf("HOLE: the host's stop of t-1 is not recorded (%d on the stop subject; ack %+v): a reviewer's message under Msg-Id stop.s-1.t-1 took its place", n, ack)
	}
	// Published again, the stop is still stored once.
	if _, err := stream.PublishStop(ctx, host, "", schema.StopRequest{V: schema.Version, Session: "s-1", Task: "t-1", Reason: "runaway agent"}); err != nil {
		t.Fatal(err)
	}
	if n := rs.countOn(t, "JW_APPROVALS", stream.StopSubject("", "s-1")); n > 2 {
		t.Errorf("%d stops stored", n)
	}
}
