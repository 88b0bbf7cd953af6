package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// watcher follows every session log and every assessment as they are
// published (plain subscriptions: a JetStream publish is also delivered to
// subscribers of its subject), so the story can wait for a fact instead of
// sleeping.
type watcher struct {
	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every update
	events      map[string][]schema.Event
	assessments map[string]schema.Assessment // by call id: the latest
	subs        []*nats.Subscription
}

func newWatcher(nc *nats.Conn, topo *stream.Topology) (*watcher, error) {
	w := &watcher{changed: make(chan struct{}), events: map[string][]schema.Event{}, assessments: map[string]schema.Assessment{}}
	sub, err := nc.Subscribe(topo.Names().EventsSubject("*"), func(m *nats.Msg) {
		var ev schema.Event
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		w.update(func() { w.events[ev.Session] = append(w.events[ev.Session], ev) })
	})
	if err != nil {
		return nil, err
	}
	w.subs = append(w.subs, sub)
	sub, err = nc.Subscribe(topo.Names().AssessmentsSubject("*"), func(m *nats.Msg) {
		// One assessment or a batch of a session's (docs/protocol.md §5.4).
		as, err := schema.DecodeAssessments(m.Data)
		if err != nil {
			return
		}
		w.update(func() {
			for _, a := range as {
				w.assessments[a.CallID] = a
			}
		})
	})
	if err != nil {
		w.close()
		return nil, err
	}
	w.subs = append(w.subs, sub)
	return w, nil
}

func (w *watcher) close() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

func (w *watcher) update(f func()) {
	w.mu.Lock()
	f()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// wait calls cond under the watcher's lock until it returns true, or until
// ctx ends or check returns an error (a child process died).
func (w *watcher) wait(ctx context.Context, what string, check func() error, cond func() bool) error {
	for {
		w.mu.Lock()
		ok := cond()
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return nil
		}
		if err := check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", ErrTimeout, what, context.Cause(ctx))
		case <-ch:
		case <-tick():
			// re-check the children now and then
		}
	}
}

// callByRequest returns the tool.call of a request (nil if not seen yet).
// The caller holds the lock.
func (w *watcher) callByRequest(session, requestID string) *schema.Call {
	for _, ev := range w.events[session] {
		if ev.Call != nil && ev.Call.RequestID == requestID {
			return ev.Call
		}
	}
	return nil
}

// callByPlan returns the tool.call that took a plan (nil if not seen yet).
// The caller holds the lock.
func (w *watcher) callByPlan(session, planID string) *schema.Call {
	for _, ev := range w.events[session] {
		if ev.Call != nil && ev.Call.Operation != nil && ev.Call.Operation.Retry != nil && ev.Call.Operation.Retry.PlanID == planID {
			return ev.Call
		}
	}
	return nil
}

// started reports whether the call's tool.started, or its tool.call in
// the combined form (call.started), was seen. The caller holds the lock.
func (w *watcher) started(session, callID string) bool {
	for _, ev := range w.events[session] {
		if (ev.Started != nil && ev.Started.CallID == callID) || (ev.Call != nil && ev.Call.Started && ev.Call.CallID == callID) {
			return true
		}
	}
	return false
}

// result returns the call's tool.result (nil if not seen yet). The caller
// holds the lock.
func (w *watcher) result(session, callID string) *schema.Result {
	for _, ev := range w.events[session] {
		if ev.Result != nil && ev.Result.CallID == callID {
			return ev.Result
		}
	}
	return nil
}

// fenced returns the latest session.fenced of the session (nil if none).
// The caller holds the lock.
func (w *watcher) fenced(session string) *schema.Fence {
	var f *schema.Fence
	for _, ev := range w.events[session] {
		if ev.Fence != nil {
			f = ev.Fence
		}
	}
	return f
}

// assessment returns the latest assessment of a call. The caller holds the
// lock.
func (w *watcher) assessment(callID string) (schema.Assessment, bool) {
	a, ok := w.assessments[callID]
	return a, ok
}

// tick returns a channel that fires after a short while: waits re-check the
// child processes at least that often.
func tick() <-chan time.Time { return time.After(100 * time.Millisecond) }
