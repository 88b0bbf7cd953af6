package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestServiceIgnoresConsumerDeliveries: a push consumer's deliver subject
// is not checked against its creator's permissions, so a role that may not
// publish on an endpoint (a worker on jw.api.prepare, a recoverer on
// jw.api.call) can still have a stream's message delivered there, in the
// endpoints' queue group. Such a message (its reply subject is the
// consumer's ack subject) is dropped unanswered and its handler never
// runs, on every endpoint of both services; a client's request is
// answered as always.
func TestServiceIgnoresConsumerDeliveries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, nc, topo := streamtest.Start(t)
	for _, tc := range []struct{ svc, endpoint string }{
		{service.Name, service.EndpointPrepare},
		{service.GatewayName, service.EndpointCall},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			var ran atomic.Int64
			svc, err := service.Start(ctx, service.Config{Conn: nc, Name: tc.svc, Prefix: topo.Prefix, Workers: 2},
				service.Endpoint{Name: tc.endpoint, Handler: func(ctx context.Context, body []byte) (any, error) {
					ran.Add(1)
					return map[string]string{"ok": "yes"}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = svc.Stop() }()
			// A message of a stream the service has nothing to do with,
			// delivered on the endpoint by a push consumer.
			carrier := topo.Names().ApprovalRequestsSubject("zz-" + tc.endpoint)
			if _, err := topo.JS.Publish(ctx, carrier, []byte(`{"session":"s-1","call_id":"c-1"}`)); err != nil {
				t.Fatal(err)
			}
			c, err := topo.ApprovalLog.CreateConsumer(ctx, jetstream.ConsumerConfig{
				Durable: "redirect-" + tc.endpoint, FilterSubject: carrier,
				DeliverSubject: stream.APISubject(topo.Prefix, tc.endpoint), DeliverGroup: micro.DefaultQueueGroup,
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Delivered (and, unanswered, delivered again after AckWait)…
			streamtest.Eventually(t, 10*time.Second, "the consumer's message delivered twice", func() bool {
				info, err := c.Info(ctx)
				return err == nil && info.Delivered.Stream >= 1 && info.NumRedelivered >= 1
			})
			// …and handled by micro: its stats count it.
			streamtest.Eventually(t, 10*time.Second, "micro counts the deliveries", func() bool {
				n := 0
				for _, e := range svc.Stats().Endpoints {
					n += e.NumRequests
				}
				return n >= 2
			})
			if n := ran.Load(); n != 0 {
				t.Fatalf("the handler of %s ran %d time(s) on a message a JetStream consumer delivered", tc.endpoint, n)
			}
			// A client's request is answered.
			resp, err := nc.Request(stream.APISubject(topo.Prefix, tc.endpoint), []byte(`{}`), 5*time.Second)
			if err != nil || string(resp.Data) != `{"ok":"yes"}` || ran.Load() != 1 {
				t.Fatalf("client request: %v %v (handler ran %d)", resp, err, ran.Load())
			}
		})
	}
}
