package recoverer

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// restartableEnv is an env on an embedded server that the test can stop
// and start again on the same store and address.
func restartableEnv(t *testing.T) (*env, *streamtest.Restartable) {
	t.Helper()
	srv, nc, topo := streamtest.StartRestartable(t, stream.TopologyConfig{LeaseTTL: time.Second, LeaseMarkerTTL: time.Second})
	return &env{t: t, nc: nc, topo: topo, planner: newPlanner(t)}, srv
}

// answer sends body to endpoint and returns the answer's error code ("" for
// a plain answer), failing the test if no answer comes within d.
func answer(t *testing.T, nc *nats.Conn, subj string, body []byte, d time.Duration) (string, []byte, error) {
	t.Helper()
	m, err := nc.Request(subj, body, d)
	if err != nil {
		return "", nil, err
	}
	return service.AnswerCode(m), m.Data, nil
}

// TestServiceAnswersAfterServerRestart: the server is stopped and started
// again on the same store under a live recovery worker that serves the
// `jingwei` service. Without a process restart, inspect, prepare and status
// answer again (the micro subscriptions come back with the connection),
// and the prepare answers the plan of a call failed before the restart.
// (TestSurvivesServerRestart runs with DisableService.)
func TestServiceAnswersAfterServerRestart(t *testing.T) {
	e, srv := restartableEnv(t)
	r := e.recoverer("a")
	e.run(r)
	<-r.Ready()
	as := e.assessments()
	w := e.writer("s-r", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusFailed, "")
	as.wait(t, "s-r", "c-1", 10*time.Second)

	srv.Restart()
	target, _ := json.Marshal(service.Target{Session: "s-r", CallID: "c-1"})
	for _, ep := range []string{service.EndpointInspect, service.EndpointPrepare, service.EndpointStatus} {
		var code string
		var data []byte
		var err error
		streamtest.Eventually(t, 30*time.Second, ep+" answers after the restart", func() bool {
			code, data, err = answer(t, e.nc, e.topo.Names().APISubject(ep), target, 5*time.Second)
			return err == nil && code == ""
		})
		if ep == service.EndpointPrepare {
			var p schema.Plan
			if err := json.Unmarshal(data, &p); err != nil || p.PriorCallID != "c-1" {
				t.Fatalf("prepare after the restart: %s %v", data, err)
			}
		}
	}
}

// TestServiceAnswersWhileJetStreamIsDown: JetStream is shut down under a
// live recovery worker while its connection and micro service stay up.
// Every request — inspect, prepare, status, a malformed one, an empty
// body — still gets an answer (an error), each within 30 s, none lost.
// (No test sent a service request while JetStream was unavailable.)
func TestServiceAnswersWhileJetStreamIsDown(t *testing.T) {
	e, srv := restartableEnv(t)
	r := e.recoverer("a")
	e.run(r)
	<-r.Ready()
	w := e.writer("s-j", "w1")
	w.call("c-1", "orders.create", effect.Idempotent, "k-1")
	w.started("c-1")
	w.result("c-1", schema.StatusFailed, "")
	// Wait for the call's assessment through status (the service is up).
	target, _ := json.Marshal(service.Target{Session: "s-j", CallID: "c-1"})
	streamtest.Eventually(t, 10*time.Second, "inspect answers", func() bool {
		code, _, err := answer(t, e.nc, e.topo.Names().APISubject(service.EndpointInspect), target, 5*time.Second)
		return err == nil && code == ""
	})

	if err := srv.Embedded().Server().ShutdownJetStream(); err != nil {
		t.Fatal(err)
	}
	type req struct {
		ep   string
		body []byte
	}
	var reqs []req
	for range 3 {
		for _, ep := range []string{service.EndpointInspect, service.EndpointPrepare, service.EndpointStatus} {
			reqs = append(reqs, req{ep, target}, req{ep, []byte(`{"session":`)}, req{ep, nil})
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lost []string
	for i, q := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			code, data, err := answer(t, e.nc, e.topo.Names().APISubject(q.ep), q.body, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lost = append(lost, fmt.Sprintf("#%d %s %q: %v after %s", i, q.ep, q.body, err, time.Since(t0).Round(time.Millisecond)))
				return
			}
			t.Logf("#%d %s %q: %q %.80s after %s", i, q.ep, q.body, code, data, time.Since(t0).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	if len(lost) > 0 {
		t.Fatalf("%d of %d requests got no answer while JetStream was down: %v", len(lost), len(reqs), lost)
	}
}
