package recoverer

import (
	"sort"
	"sync"

	"github.com/jingwei/jingwei/schema"
)

// maxAwaiting bounds the calls awaiting review that a recoverer remembers
// for jw.api.status; the oldest are forgotten first (they stay needs_review
// in the log: prepare always decides from the history).
const maxAwaiting = 10_000

// awaiting is the set of calls whose latest assessment is needs_review, in
// the order they were assessed. Safe for concurrent use.
type awaiting struct {
	mu    sync.Mutex
	max   int
	n     uint64
	calls map[[2]string]awaitingCall
	// settled are the calls forgotten because a plan was issued or a
	// completed review settled them (the latest max, oldest dropped
	// first): the same needs_review assessment published again (a fresh
	// recoverer reclassifying, a redelivery) does not bring them back.
	settled map[[2]string]struct{}
	order   [][2]string
}

type awaitingCall struct {
	a schema.Assessment
	n uint64
}

func newAwaiting(max int) *awaiting {
	return &awaiting{max: max, calls: make(map[[2]string]awaitingCall), settled: make(map[[2]string]struct{})}
}

// note records an assessment: needs_review adds the call, anything else
// removes it.
func (w *awaiting) note(a schema.Assessment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{a.Session, a.CallID}
	if a.Decision != schema.DecisionNeedsReview {
		delete(w.calls, k)
		return
	}
	if _, done := w.settled[k]; done {
		return
	}
	w.n++
	w.calls[k] = awaitingCall{a: a, n: w.n}
	if len(w.calls) > w.max {
		var oldest [2]string
		var on uint64
		for k, c := range w.calls {
			if on == 0 || c.n < on {
				oldest, on = k, c.n
			}
		}
		delete(w.calls, oldest)
	}
}

// replace takes over the calls of o (the set rebuilt at start); calls
// noted in w meanwhile are kept, after them.
func (w *awaiting) replace(o *awaiting) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.calls {
		o.calls[k] = awaitingCall{a: c.a, n: o.n + c.n}
	}
	w.calls, w.n = o.calls, o.n+w.n
	for _, k := range w.order {
		if _, done := o.settled[k]; !done {
			o.settled[k] = struct{}{}
			o.order = append(o.order, k)
		}
	}
	w.settled, w.order = o.settled, o.order
}

// forget removes a call (a plan was issued for it).
func (w *awaiting) forget(session, callID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{session, callID}
	delete(w.calls, k)
	if _, done := w.settled[k]; done {
		return
	}
	w.settled[k] = struct{}{}
	w.order = append(w.order, k)
	if len(w.order) > w.max {
		delete(w.settled, w.order[0])
		w.order = w.order[1:]
	}
}

func (w *awaiting) list(session string) []schema.Assessment {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []awaitingCall
	for _, c := range w.calls {
		if session == "" || c.a.Session == session {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	as := make([]schema.Assessment, len(out))
	for i, c := range out {
		as[i] = c.a
	}
	return as
}
