package toolworker

import (
	"sync"

	"github.com/jingwei/jingwei/schema"
)

// inflight counts the calls the gateway waits for, per session and per
// caller, and refuses one beyond either limit with busy.
type inflight struct {
	maxSession, maxCaller int

	mu        sync.Mutex
	bySession map[string]int
	byCaller  map[string]int
}

func newInflight(maxSession, maxCaller int) *inflight {
	return &inflight{maxSession: maxSession, maxCaller: maxCaller, bySession: map[string]int{}, byCaller: map[string]int{}}
}

// acquire counts one call of session by caller, or returns busy (nothing
// counted) when either is at its limit; release uncounts it.
func (l *inflight) acquire(session, caller string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.bySession[session] >= l.maxSession:
		return nil, schema.Errorf(schema.CodeBusy, "session %s has %d calls in flight at this gateway, its most (ask again later)", session, l.maxSession)
	case l.byCaller[caller] >= l.maxCaller:
		return nil, schema.Errorf(schema.CodeBusy, "caller %q has %d calls in flight at this gateway, its most (ask again later)", caller, l.maxCaller)
	}
	l.bySession[session]++
	l.byCaller[caller]++
	var once sync.Once
	return func() { once.Do(func() { l.release(session, caller) }) }, nil
}

func (l *inflight) release(session, caller string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySession[session]--; l.bySession[session] <= 0 {
		delete(l.bySession, session)
	}
	if l.byCaller[caller]--; l.byCaller[caller] <= 0 {
		delete(l.byCaller, caller)
	}
}
