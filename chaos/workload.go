package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/tools"
)

// task is the task every action runs in.
const task = "chaos"

// publication is one publish of an action's request: at At after the
// workload starts; Again for a second publish with the same request id,
// MsgID when it carries the request id as Nats-Msg-Id (every first publish
// does, as the protocol asks; half the second ones do not, as a client
// that lost its state would not, so the worker's own request-id check is
// exercised and not only the server's dedup window).
type publication struct {
	At     time.Duration
	Action int
	Again  bool
	MsgID  bool
}

// workload is the run's logical actions and when each is published.
type workload struct {
	actions []action
	args    []json.RawMessage
	pubs    []publication
}

// newWorkload draws the actions: half orders, half payments, over the
// sessions at random, published evenly over the first 85 % of d (the rest
// leaves time for faults on the last calls); a fraction republish of them
// published again 0.2 to 8 s after the first (within 95 % of d).
func newWorkload(rng *rand.Rand, runID string, actions, sessions int, republish float64, d time.Duration) *workload {
	w := &workload{}
	span := time.Duration(float64(d) * 0.85)
	skus := []string{"A-1", "B-2", "C-3"}
	for i := range actions {
		a := action{
			ID:        fmt.Sprintf("a%04d", i),
			Session:   fmt.Sprintf("%s-s%02d", runID, rng.IntN(sessions)),
			Task:      task,
			RequestID: fmt.Sprintf("%s-r%04d", runID, i),
		}
		a.Marker = runID + "-" + a.ID
		var args any
		if rng.IntN(2) == 0 {
			a.Tool = tools.OrdersCreate
			args = map[string]any{"sku": skus[rng.IntN(len(skus))], "qty": 1 + rng.IntN(5), "customer": a.Marker}
		} else {
			a.Tool = tools.PaymentsCharge
			args = map[string]any{"account": a.Marker, "amount_cents": 100 + rng.IntN(9900)}
		}
		b, _ := json.Marshal(args)
		w.actions = append(w.actions, a)
		w.args = append(w.args, b)
		at := span * time.Duration(i) / time.Duration(max(actions, 1))
		w.pubs = append(w.pubs, publication{At: at, Action: i, MsgID: true})
		if rng.Float64() < republish {
			again := min(at+200*time.Millisecond+time.Duration(rng.Int64N(int64(7800*time.Millisecond))), d*95/100)
			w.pubs = append(w.pubs, publication{At: again, Action: i, Again: true, MsgID: rng.IntN(2) == 0})
		}
	}
	sort.SliceStable(w.pubs, func(i, j int) bool { return w.pubs[i].At < w.pubs[j].At })
	return w
}

// pubStats counts what the publisher did.
type pubStats struct {
	mu            sync.Mutex
	published     int
	again         int
	retries       int
	duplicateAcks int
	failed        []string
}

// publish publishes the workload as an agent does: a JetStream publish on
// jw.requests.<session> with the agent's key, retried (same Nats-Msg-Id)
// until it is acknowledged, for up to a minute. It returns when every
// publication is done or ctx ends; acked is set on the actions whose
// publish got a PubAck.
func (w *workload) publish(ctx context.Context, js jetstream.JetStream, t0 time.Time, st *pubStats, acked func(i int)) {
	for _, p := range w.pubs {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(t0.Add(p.At))):
		}
		a := w.actions[p.Action]
		q := schema.Request{V: schema.Version, RequestID: a.RequestID, Session: a.Session, Task: a.Task, Tool: a.Tool, Arguments: w.args[p.Action]}
		body, _ := json.Marshal(q)
		var opts []jetstream.PublishOpt
		if p.MsgID {
			opts = append(opts, jetstream.WithMsgID(stream.RequestMsgIDOf(q)))
		}
		tries := 0
		var ack *jetstream.PubAck
		err := retry(ctx, time.Minute, func(ctx context.Context) error {
			tries++
			var err error
			ack, err = js.Publish(ctx, subjectPrefix+".requests."+a.Session, body, opts...)
			return err
		})
		st.mu.Lock()
		st.retries += tries - 1
		if err != nil {
			st.failed = append(st.failed, fmt.Sprintf("%s: %v", a.RequestID, err))
		} else {
			st.published++
			if p.Again {
				st.again++
			}
			if ack.Duplicate {
				st.duplicateAcks++
			}
		}
		st.mu.Unlock()
		if err == nil {
			acked(p.Action)
		}
	}
}
