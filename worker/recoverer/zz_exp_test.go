package recoverer

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

func TestZZPublishCost(t *testing.T) {
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{Duplicates: time.Second}})
	ctx := context.Background()
	assessment, _ := schema.EncodeAssessment(&schema.Assessment{Session: "s-63", CallID: "c-19999", Tool: "orders.create", Task: "t-1", Key: "op-c-19999",
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Outcome: schema.OutcomeCompleted, Evidence: "ok", Decision: schema.DecisionRefuse, Attempts: 1, Chain: []string{"c-19999"}})
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const n = 20000
	nc := topo.JS.Conn()
	ajs, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(512))
	var got atomic.Int64
	done := make(chan struct{}, 1)
	inbox := nc.NewInbox()
	sub, _ := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		if got.Add(1)%n == 0 {
			done <- struct{}{}
		}
	})
	defer sub.Unsubscribe()
	for round := 0; round < 3; round++ {
		c0, w0 := cpu(), time.Now()
		for i := 0; i < n; i++ {
			msg := nats.NewMsg(topo.AssessmentsSubject("s-63"))
			msg.Data = assessment
			msg.Header.Set(HeaderAssessmentID, "a.s-63.c-19999.ok")
			if _, err := ajs.PublishMsgAsync(msg); err != nil {
				t.Fatal(err)
			}
		}
		<-ajs.PublishAsyncComplete()
		t.Logf("nats.go async: cpu %.2fus/msg wall %.2fus/msg", float64((cpu()-c0).Microseconds())/n, float64(time.Since(w0).Microseconds())/n)
		c0, w0 = cpu(), time.Now()
		for i := 0; i < n; i++ {
			msg := nats.NewMsg(topo.AssessmentsSubject("s-63"))
			msg.Data = assessment
			msg.Reply = inbox + "." + strconv.Itoa(i)
			msg.Header.Set(HeaderAssessmentID, "a.s-63.c-19999.ok")
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		<-done
		t.Logf("own inbox: cpu %.2fus/msg wall %.2fus/msg", float64((cpu()-c0).Microseconds())/n, float64(time.Since(w0).Microseconds())/n)
		c0, w0 = cpu(), time.Now()
		for i := 0; i < n; i++ {
			msg := nats.NewMsg(topo.AssessmentsSubject("s-63"))
			msg.Data = assessment
			msg.Header.Set(HeaderAssessmentID, "a.s-63.c-19999.ok")
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := topo.JS.Publish(ctx, topo.AssessmentsSubject("s-63"), assessment); err != nil {
			t.Fatal(err)
		}
		t.Logf("core + 1 ack: cpu %.2fus/msg wall %.2fus/msg", float64((cpu()-c0).Microseconds())/n, float64(time.Since(w0).Microseconds())/n)
	}
}
