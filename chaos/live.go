package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

// liveCall is what the live view knows of one call.
type liveCall struct {
	Key     callKey
	Tool    string
	Owner   string
	PlanID  string
	Started bool
	Done    bool
	Status  schema.Status
	Fenced  bool
	Epoch   uint64
}

// live follows the session logs and the assessments as they are written
// (ordered consumers, as admin), for the harness's own decisions during the
// run: where a pause lands, when the system has settled, which plan ran.
// The invariants never use it: they read everything again at the end.
// Safe for concurrent use.
type live struct {
	log    zerolog.Logger
	prefix string // the run's sessions

	mu        sync.Mutex
	calls     map[callKey]*liveCall
	open      map[string][]*liveCall // session → calls not fenced off
	byPlan    map[string]callKey
	assessed  map[callKey]schema.Assessment // the latest
	events    int
	last      time.Time // last event or assessment seen
	consumers []jetstream.ConsumeContext
}

func newLive(log zerolog.Logger) *live {
	return &live{log: log, calls: map[callKey]*liveCall{}, open: map[string][]*liveCall{}, byPlan: map[string]callKey{}, assessed: map[callKey]schema.Assessment{}, last: time.Now()}
}

// start subscribes to the two streams from their first message; it waits
// until they exist.
func (l *live) start(ctx context.Context, js jetstream.JetStream, sessionPrefix string) error {
	l.prefix = sessionPrefix
	for _, s := range []struct {
		name, filter string
		h            func(jetstream.Msg)
	}{
		{streamEvents, subjectPrefix + ".events.>", l.onEvent},
		{streamAssessments, subjectPrefix + ".assessments.>", l.onAssessment},
	} {
		cons, err := js.OrderedConsumer(ctx, s.name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.filter}, InactiveThreshold: time.Minute})
		if err != nil {
			return fmt.Errorf("follow %s: %w", s.name, err)
		}
		cc, err := cons.Consume(s.h, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			l.log.Debug().Err(err).Str("stream", s.name).Msg("live view")
		}))
		if err != nil {
			return fmt.Errorf("follow %s: %w", s.name, err)
		}
		l.mu.Lock()
		l.consumers = append(l.consumers, cc)
		l.mu.Unlock()
	}
	return nil
}

func (l *live) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.consumers {
		c.Stop()
	}
	l.consumers = nil
}

func (l *live) onEvent(m jetstream.Msg) {
	ev, err := schema.DecodeEvent(m.Data())
	if err != nil || !strings.HasPrefix(ev.Session, l.prefix) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events++
	l.last = time.Now()
	s := ev.Session
	switch {
	case ev.Call != nil:
		k := callKey{s, ev.Call.CallID}
		if l.calls[k] != nil {
			return
		}
		// A call in the combined form (call.started) is started with its tool.call.
		c := &liveCall{Key: k, Tool: ev.Call.Tool, Owner: m.Headers().Get(headerOwner), Epoch: ev.Epoch, Started: ev.Call.Started}
		if op := ev.Call.Operation; op != nil && op.Retry != nil {
			c.PlanID = op.Retry.PlanID
			l.byPlan[c.PlanID] = k
		}
		l.calls[k] = c
		l.open[s] = append(l.open[s], c)
	case ev.Started != nil:
		if c := l.calls[callKey{s, ev.Started.CallID}]; c != nil {
			c.Started = true
		}
	case ev.Result != nil:
		if c := l.calls[callKey{s, ev.Result.CallID}]; c != nil {
			c.Done, c.Status = true, ev.Result.Status
		}
	case ev.Fence != nil:
		keep := l.open[s][:0]
		for _, c := range l.open[s] {
			if ev.Fence.Epoch > c.Epoch {
				c.Fenced = true
				continue
			}
			keep = append(keep, c)
		}
		l.open[s] = keep
	}
}

func (l *live) onAssessment(m jetstream.Msg) {
	// One assessment or a batch of one session's (docs/protocol.md §5.4).
	as, err := schema.DecodeAssessments(m.Data())
	if err != nil || !strings.HasPrefix(as[0].Session, l.prefix) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
	for _, a := range as {
		l.assessed[callKey{a.Session, a.CallID}] = a
	}
}

// openCalls returns the calls an owner appended that have no result yet.
func (l *live) openCalls(owner string) []liveCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []liveCall
	for _, c := range l.calls {
		if c.Owner == owner && !c.Done {
			out = append(out, *c)
		}
	}
	return out
}

// startedPayment reports whether an owner has a payments.charge call
// started and without a result (its body is running).
func (l *live) startedPayment(owner string) bool {
	for _, c := range l.openCalls(owner) {
		if c.Tool == tools.PaymentsCharge && c.Started {
			return true
		}
	}
	return false
}

// startedAny reports whether an owner has any call started and without a
// result.
func (l *live) startedAny(owner string) bool {
	for _, c := range l.openCalls(owner) {
		if c.Started {
			return true
		}
	}
	return false
}

// assessment returns the latest assessment of a call.
func (l *live) assessment(k callKey) (schema.Assessment, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.assessed[k]
	return a, ok
}

// planRun reports whether the attempt of a plan is on the log and has a
// result.
func (l *live) planRun(planID string) (recorded, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.byPlan[planID]
	if !ok {
		return false, false
	}
	return true, l.calls[k].Done
}

// unsettled counts the calls without an assessment (open or closed), and
// returns when the view last changed.
func (l *live) unsettled() (int, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k := range l.calls {
		if _, ok := l.assessed[k]; !ok {
			n++
		}
	}
	return n, l.last
}
