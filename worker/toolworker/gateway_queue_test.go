package toolworker_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/worker/service"
)

// TestGatewayCallsNotQueuedBehindSlowCalls: 32 calls that nobody runs are
// sent at once (each waits out the 10 s call timeout), and 100 malformed
// requests (invalid_request, judged at once, nothing published) while they
// wait. Every one of the 32 must be published within 5 s, and every
// malformed request answered within 2 s. The gateway's micro endpoints are
// 64 queue subscriptions the server picks from at random, busy or not;
// when each answered its requests one after the other, a request that
// landed on one waiting for a slow call waited with it, up to the call
// timeout (30 s by default — also the service client's default timeout:
// the caller got no_answer while most of the gateway was idle). A worker
// now leaves a slow request to a goroutine after service.DefaultAnswerWait.
func TestGatewayCallsNotQueuedBehindSlowCalls(t *testing.T) {
	const callTimeout, nSlow = 10 * time.Second, 32
	topo, nc := gatewaySetup(t, callTimeout)
	t0 := time.Now()
	var slow sync.WaitGroup
	for i := range nSlow {
		slow.Add(1)
		go func() {
			defer slow.Done()
			b, _ := json.Marshal(schema.Request{V: 1, RequestID: fmt.Sprintf("slow-%d", i), Session: fmt.Sprintf("s-slow-%d", i), Task: "t", Tool: "nobody.runs", Arguments: json.RawMessage(`{}`)})
			_, _ = nc.Request(topo.Names().APISubject(service.EndpointCall), b, 4*callTimeout)
		}()
	}
	defer slow.Wait()
	streamtest.Eventually(t, callTimeout/2, "a third of the slow calls published", func() bool { return waiting(t, topo) >= nSlow/3 })
	// The quick requests are sent together, while the slow calls wait.
	var mu sync.Mutex
	var late []string
	var quick sync.WaitGroup
	for i := range 100 {
		quick.Add(1)
		go func() {
			defer quick.Done()
			t0 := time.Now()
			m, err := nc.Request(topo.Names().APISubject(service.EndpointCall), []byte(`{"v":1}`), 4*callTimeout)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("malformed request %d: %v", i, err)
			case service.AnswerCode(m) != string(schema.CodeInvalidRequest):
				t.Errorf("malformed request %d: answer %q %s", i, service.AnswerCode(m), m.Data)
			case d > 2*time.Second:
				late = append(late, fmt.Sprintf("#%d after %s", i, d.Round(time.Millisecond)))
			}
		}()
	}
	// When were all slow calls published?
	var allIn time.Duration
	for deadline := time.Now().Add(4 * callTimeout); time.Now().Before(deadline); time.Sleep(streamtest.PollInterval) {
		if waiting(t, topo) >= nSlow {
			allIn = time.Since(t0)
			break
		}
	}
	quick.Wait()
	if allIn == 0 || allIn > 5*time.Second {
		t.Errorf("%d calls sent at once to a gateway of 64 workers were all published only after %s (0: never), want within 5s: calls queued behind calls", nSlow, allIn.Round(time.Millisecond))
	}
	if len(late) > 0 {
		t.Errorf("%d of 100 requests judged at once were answered late, behind a slow call, while most gateway workers were idle: %v", len(late), late)
	}
}
