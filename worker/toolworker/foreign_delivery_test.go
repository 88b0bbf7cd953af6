package toolworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// TestPartitionIgnoresAnotherConsumersDeliveries: a push consumer's
// deliver subject is checked against no permission, so a client of the
// trusted account (the recoverer's role may not touch the work queue) can
// have a consumer of another stream deliver on a partition's pull inbox a
// message that reads as a tool request of one of its sessions. The
// partition runs only its own consumer's deliveries (by the stream and
// consumer the ack subject names): the phantom request, which is in no
// work queue, never runs. Before, the worker ran it as a tool call (a
// client learns a pull's inbox from the heartbeats the server sends there,
// which every _INBOX.> subscriber of the account receives).
func TestPartitionIgnoresAnotherConsumersDeliveries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := setup(t)
	p := newProbe()
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	nc := topo.JS.Conn()
	const session = "s-x"
	request := func(id string, n int) []byte {
		b, _ := json.Marshal(schema.Request{V: 1, RequestID: id, Session: session, Task: worker.DefaultTask, Tool: "echo", Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
		return b
	}

	// The inbox the partition of s-x pulls its requests on.
	inbox := streamtest.WatchPullInbox(t, nc, topo.Names().StreamName("REQUESTS"), topo.Names().RequestConsumerName(topo.Names().PartitionOf(session)))

	// A real request runs.
	if _, err := topo.JS.Publish(ctx, topo.Names().RequestsSubject(session), request("r-1", 1), jetstream.WithMsgID(stream.RequestMsgID(session, "r-1"))); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 20*time.Second, "r-1 runs", func() bool { return slices.Equal(p.ran(session), []int{1}) })
	// A phantom request, stored on another stream under a subject of the
	// session, delivered on that inbox.
	if _, err := topo.JS.Publish(ctx, topo.Names().AnswersSubject(session), request("r-phantom", 9)); err != nil {
		t.Fatal(err)
	}
	streamtest.Intrude(t, topo.AnswerLog, topo.Names().AnswersSubject(session), inbox(), 1)
	// A real request after it runs, and the phantom never did.
	if _, err := topo.JS.Publish(ctx, topo.Names().RequestsSubject(session), request("r-2", 2), jetstream.WithMsgID(stream.RequestMsgID(session, "r-2"))); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 20*time.Second, "r-2 runs", func() bool { return slices.Contains(p.ran(session), 2) })
	if got := p.ran(session); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("runs of %s: %v, want [1 2] (the phantom request is 9)", session, got)
	}
}

// TestApprovalsConsumerIgnoresAnotherConsumersDeliveries: task stops are
// not signed — the server lets only hosts publish them. A message that
// reads as a stop, stored by another client on a stream it may write (a
// scratch stream here; a KV key "<session>.stop" for a trusted role) and
// delivered by another consumer on the approvals consumer's pull inbox,
// stops nothing: the session's log gets no task.stopped and its task still
// runs calls. Before, the worker recorded the stop.
func TestApprovalsConsumerIgnoresAnotherConsumersDeliveries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := setup(t)
	p := newProbe()
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	nc := topo.JS.Conn()
	const session = "s-y"

	inbox := streamtest.WatchPullInbox(t, nc, topo.Names().StreamName("APPROVALS"), topo.Names().ApprovalConsumerName())
	publish(t, topo, session, "r-1", "echo", `{"n":1}`)
	streamtest.Eventually(t, 20*time.Second, "r-1 runs", func() bool { return slices.Equal(p.ran(session), []int{1}) })
	scratch, err := topo.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "SCRATCH", Subjects: []string{"zz.scratch.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := json.Marshal(schema.StopRequest{V: 1, Session: session, Task: worker.DefaultTask, Reason: "phantom", At: time.Now().UTC().Format(time.RFC3339)})
	if _, err := topo.JS.Publish(ctx, "zz.scratch."+session+".stop", stop); err != nil {
		t.Fatal(err)
	}
	streamtest.Intrude(t, scratch, "", inbox(), 1)
	publish(t, topo, session, "r-2", "echo", `{"n":2}`)
	streamtest.Eventually(t, 20*time.Second, "r-2 runs", func() bool { return slices.Contains(p.ran(session), 2) })
	h, err := topo.Logs().Load(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range h {
		if ev.Type == schema.TypeTaskStopped {
			t.Fatalf("the log of %s records a task stop no host published: %+v", session, ev.Stop)
		}
	}
}
