// Counting calls in jw_budget for the budget stage of admission.

package worker

import (
	"context"
	"sync"
	"time"

	"github.com/jingwei/jingwei/stream"
)

// count counts one call of task and returns how the budget stage gets the
// usage. A task whose count can be deferred (see Config.History) is
// counted in memory at once; otherwise the count is written alongside the
// tool.call append, after reconciling the task with the history once if
// the runtime knows it.
func (r *Runtime) count(ctx context.Context, task string) func() (stream.Usage, error) {
	if u, ok := r.deferred(task); ok {
		return func() (stream.Usage, error) { return u, nil }
	}
	type counted struct {
		u   stream.Usage
		err error
	}
	countc := make(chan counted, 1)
	go func() {
		cctx, cancel := r.writeContext(ctx)
		defer cancel()
		u, err := r.countNow(cctx, task)
		countc <- counted{u, err}
	}()
	var once sync.Once
	var c counted
	return func() (stream.Usage, error) {
		once.Do(func() { c = <-countc })
		return c.u, c.err
	}
}

// deferred counts one call of task in memory and returns the usage after
// it, if the task's count can be deferred (see Config.History): the
// budget stage then needs no wait. False counts nothing.
func (r *Runtime) deferred(task string) (stream.Usage, bool) {
	if r.dc != nil && r.isReconciled(task) {
		return r.dc.Defer(r.cfg.Session, task)
	}
	return stream.Usage{}, false
}

// countNow writes one count of task, reconciling the task first if it
// was not yet. A transient failure of jw_budget (a 503 while a stream
// leader is elected, a request timeout, a reconnect) is retried with
// backoff until ctx ends (the call's WriteTimeout): the budget stage never
// refuses a call because its store was briefly unavailable. The attempt is
// counted once however often the write is retried: a failed count stays
// pending in the counter, and a retry only flushes it (a Counter with a
// Get that flushes, as *stream.Budget has; another Counter is asked to
// Add again, which may count the attempt twice: high, never low).
func (r *Runtime) countNow(ctx context.Context, task string) (stream.Usage, error) {
	wait := 20 * time.Millisecond
	counted := false
	for {
		u, err := r.countOnce(ctx, task, &counted)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return u, err
		}
		r.sessionLog().Warn().Err(err).Str("task", task).Dur("retry_in", wait).Msg("jw_budget unavailable; counting again")
		select {
		case <-ctx.Done():
			return u, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// countOnce is one try of countNow; counted says the attempt's count was
// already handed to the counter (it is pending there if its write failed).
func (r *Runtime) countOnce(ctx context.Context, task string, counted *bool) (stream.Usage, error) {
	if r.dc != nil && !r.isReconciled(task) {
		r.bmu.Lock()
		recorded := r.recorded[task]
		r.bmu.Unlock()
		if _, err := r.dc.Reconcile(ctx, r.cfg.Session, task, recorded, r.cfg.BudgetLimit); err != nil {
			// Still count this attempt (a failed write stays pending in the
			// counter), but refuse: the count may not cover the history.
			if !*counted {
				_, _ = r.cfg.Budget.Add(ctx, r.cfg.Session, task, r.cfg.BudgetLimit)
				*counted = true
			}
			return stream.Usage{}, err
		}
		r.bmu.Lock()
		r.reconciled[task] = true
		r.bmu.Unlock()
	}
	if g, ok := r.cfg.Budget.(interface {
		Get(ctx context.Context, session, task string) (stream.Usage, error)
	}); ok && *counted {
		return g.Get(ctx, r.cfg.Session, task)
	}
	*counted = true
	return r.cfg.Budget.Add(ctx, r.cfg.Session, task, r.cfg.BudgetLimit)
}

func (r *Runtime) isReconciled(task string) bool {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	return r.reconciled[task]
}
