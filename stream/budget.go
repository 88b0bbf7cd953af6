package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// Usage is the value stored under <session>.<task> in jw_budget.
type Usage struct {
	// ToolCalls counts every recorded attempt of the task; it only grows.
	ToolCalls int64 `json:"tool_calls"`
	// Limit is the most attempts the task may make; 0 means no limit.
	Limit int64 `json:"limit"`
	// Revision is the KV revision the value was read or written at; not
	// stored.
	Revision uint64 `json:"-"`
}

// Over reports whether the count is beyond a non-zero limit.
func (u Usage) Over() bool { return u.Limit > 0 && u.ToolCalls > u.Limit }

// DefaultBudgetFlushInterval is how long a deferred count (see
// Budget.Defer) waits at most before it is written to jw_budget.
const DefaultBudgetFlushInterval = 50 * time.Millisecond

// budgetFlushTimeout bounds one background write of deferred counts.
const budgetFlushTimeout = 10 * time.Second

// BudgetConfig configures a Budget. The zero value is ready to use.
type BudgetConfig struct {
	// FlushInterval is the longest a count taken with Defer waits before
	// it is written; counts deferred meanwhile go out in one
	// compare-and-set. Defaults to DefaultBudgetFlushInterval.
	FlushInterval time.Duration
	// AttemptTimeout bounds each request to the bucket (a read, a
	// compare-and-set). A request sent while jw_budget's stream elects a
	// leader (a node lost) is dropped, not answered: without the bound it
	// held the count, and so the call, until the caller's deadline,
	// although the new leader answers a re-send at once. A timed-out
	// request fails with context.DeadlineExceeded (Transient), which the
	// caller retries; a compare-and-set that landed unanswered makes the
	// retry count again (high, never low, as for any lost answer).
	// Defaults to DefaultBudgetAttemptTimeout.
	AttemptTimeout time.Duration
}

// DefaultBudgetAttemptTimeout is BudgetConfig.AttemptTimeout's default.
const DefaultBudgetAttemptTimeout = time.Second

// Budget counts tool calls per session and task in the jw_budget bucket.
// Every write is a compare-and-set on the key's revision that adds this
// process's new counts to the stored value, retried on a mismatch, so
// counts are exact across goroutines and processes; nothing is ever
// refunded. Add writes at once; Defer counts in memory and writes within
// FlushInterval (for a writer that can reconcile from its history after a
// crash, see Reconcile). Safe for concurrent use; build it with NewBudget.
type Budget struct {
	kv      jetstream.KeyValue
	every   time.Duration
	attempt time.Duration

	mu        sync.Mutex
	keys      map[string]*budgetKey
	bySession map[string][]string // the keys of each session (Forget)
}

// budgetKey is what a Budget knows of one key.
type budgetKey struct {
	last      Usage // last value read or written: a hint for the CAS, never trusted
	known     bool  // last holds a value read or written by this Budget
	pending   int64 // counted by Defer (or a failed write), not yet written
	scheduled bool  // a flush of pending is scheduled

	// flushing is held while pending counts are being written, so a Flush
	// or Get returns only after a background write in flight is done.
	flushing sync.Mutex
}

// NewBudget returns a budget store on kv (normally Topology.Budget) with
// the default BudgetConfig.
func NewBudget(kv jetstream.KeyValue) *Budget { return NewBudgetWith(kv, BudgetConfig{}) }

// NewBudgetWith returns a budget store on kv configured by cfg.
func NewBudgetWith(kv jetstream.KeyValue, cfg BudgetConfig) *Budget {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultBudgetFlushInterval
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultBudgetAttemptTimeout
	}
	return &Budget{kv: kv, every: cfg.FlushInterval, attempt: cfg.AttemptTimeout, keys: make(map[string]*budgetKey), bySession: make(map[string][]string)}
}

// BudgetKey returns the jw_budget key "<session>.<task>", or
// ErrInvalidBudgetKey.
func BudgetKey(session, task string) (string, error) {
	if !token(session) || !token(task) {
		return "", fmt.Errorf("%w: session %q, task %q (want 1-128 bytes of [A-Za-z0-9_-])", ErrInvalidBudgetKey, session, task)
	}
	return session + "." + task, nil
}

// state returns the state of key. b.mu is held.
func (b *Budget) state(key string) *budgetKey {
	st := b.keys[key]
	if st == nil {
		st = &budgetKey{}
		b.keys[key] = st
		session, _, _ := strings.Cut(key, ".")
		b.bySession[session] = append(b.bySession[session], key)
	}
	return st
}

// Add counts one tool call for session and task, writes it at once
// together with any counts deferred for the key, and returns the usage
// after the increment. A key that does not exist yet is created with limit
// (0 = no limit); the limit of an existing key is kept. The caller decides
// what an over-limit usage means (see Usage.Over); the count stands either
// way. If the write fails the counts stay pending and are written later:
// an attempt is never dropped from the count.
func (b *Budget) Add(ctx context.Context, session, task string, limit int64) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, err
	}
	b.mu.Lock()
	st := b.state(key)
	n := st.pending + 1
	st.pending = 0
	b.mu.Unlock()
	u, err := b.addN(ctx, key, n, limit)
	if err != nil {
		b.requeue(key, n)
	}
	return u, err
}

// Defer counts one tool call for session and task in memory if the key
// has no limit as far as this Budget knows (it has read or written the key
// before, and the limit was 0); the count is written within FlushInterval,
// together with every other count deferred for the key meanwhile. It
// returns the usage including the deferred counts and true, or false
// (nothing counted) when the key is unknown or has a limit: use Add then.
//
// A deferred count lives only in this process until it is written: a
// writer that defers must, after a crash, be followed by one that
// reconciles from the session's history (Reconcile), or the counts of the
// last FlushInterval are lost from jw_budget. A limit set by another
// process on a key this Budget defers is seen at the next write.
func (b *Budget) Defer(session, task string) (Usage, bool) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.keys[key]
	if st == nil || !st.known || st.last.Limit != 0 {
		return Usage{}, false
	}
	st.pending++
	u := st.last
	u.ToolCalls += st.pending
	b.schedule(key, st)
	return u, true
}

// Reconcile makes the count of session and task cover recorded, the
// number of attempts a writer found in the session's history, and returns
// the usage: the stored count plus this Budget's pending counts, or
// recorded if that is more (an attempt recorded by a writer that crashed
// before its count was written). It writes the result if it differs from
// the stored value, creating the key with limit if it does not exist.
func (b *Budget) Reconcile(ctx context.Context, session, task string, recorded, limit int64) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, err
	}
	b.mu.Lock()
	st := b.state(key)
	n := st.pending
	st.pending = 0
	b.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			b.requeue(key, n)
			return Usage{}, err
		}
		cur, err := b.get(ctx, key)
		next := Usage{ToolCalls: max(n, recorded), Limit: limit}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			b.requeue(key, n)
			return Usage{}, err
		case max(cur.ToolCalls+n, recorded) == cur.ToolCalls:
			b.remember(key, cur)
			return cur, nil
		default:
			next = Usage{ToolCalls: max(cur.ToolCalls+n, recorded), Limit: cur.Limit, Revision: cur.Revision}
		}
		stored, again, err := b.write(ctx, key, next)
		if err != nil {
			b.requeue(key, n)
			return Usage{}, err
		}
		if !again {
			return stored, nil
		}
	}
}

// write stores next under key with a compare-and-set on next.Revision (0:
// a create) and remembers it. again reports that the key moved since it
// was read (it exists now, or has another revision): read it and try
// again.
func (b *Budget) write(ctx context.Context, key string, next Usage) (stored Usage, again bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, b.attempt)
	defer cancel()
	var rev uint64
	if next.Revision == 0 {
		rev, err = b.kv.Create(ctx, key, mustJSON(next))
		again = errors.Is(err, jetstream.ErrKeyExists)
	} else {
		rev, err = b.kv.Update(ctx, key, mustJSON(next), next.Revision)
		again = errors.Is(err, jetstream.ErrKeyRevisionMismatch) || planCASConflict(err)
	}
	switch {
	case again:
		return Usage{}, true, nil
	case err != nil:
		return Usage{}, false, fmt.Errorf("stream: budget %s: %w", key, err)
	}
	next.Revision = rev
	b.remember(key, next)
	return next, false, nil
}

// Flush writes every deferred count now and waits for background writes in
// flight. It returns the first error; counts that could not be written stay
// pending.
func (b *Budget) Flush(ctx context.Context) error {
	b.mu.Lock()
	keys := make([]string, 0, len(b.keys))
	for k := range b.keys {
		keys = append(keys, k) // also those with a write in flight: wait for it
	}
	b.mu.Unlock()
	var first error
	for _, k := range keys {
		if err := b.flushKey(ctx, k); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Forget drops what the budget remembers of session's keys that have
// nothing left to write (no deferred count, no write in flight): a
// long-running writer calls it when it lets a session go, so
// the budget's memory follows the sessions held, not every session ever
// seen. A key forgotten is read again on its next use.
func (b *Budget) Forget(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := b.bySession[session]
	kept := keys[:0]
	for _, k := range keys {
		st := b.keys[k]
		if st == nil {
			continue
		}
		if st.pending != 0 || !st.flushing.TryLock() {
			kept = append(kept, k)
			continue
		}
		st.flushing.Unlock()
		delete(b.keys, k)
	}
	if len(kept) == 0 {
		delete(b.bySession, session)
	} else {
		b.bySession[session] = kept
	}
}

// schedule arranges a flush of key within FlushInterval. b.mu is held.
func (b *Budget) schedule(key string, st *budgetKey) {
	if st.scheduled {
		return
	}
	st.scheduled = true
	time.AfterFunc(b.every, func() {
		b.mu.Lock()
		st.scheduled = false
		forgotten := b.keys[key] != st
		b.mu.Unlock()
		if forgotten {
			return // Forget found nothing left to write
		}
		ctx, cancel := context.WithTimeout(context.Background(), budgetFlushTimeout)
		defer cancel()
		_ = b.flushKey(ctx, key) // on failure the counts are pending again and rescheduled
	})
}

// flushKey writes the pending counts of key.
func (b *Budget) flushKey(ctx context.Context, key string) error {
	b.mu.Lock()
	st := b.state(key)
	b.mu.Unlock()
	st.flushing.Lock()
	defer st.flushing.Unlock()
	b.mu.Lock()
	n, limit := st.pending, st.last.Limit
	st.pending = 0
	b.mu.Unlock()
	if n == 0 {
		return nil
	}
	if _, err := b.addN(ctx, key, n, limit); err != nil {
		b.requeue(key, n)
		return err
	}
	return nil
}

// requeue puts n counts whose write failed back as pending and schedules
// another try. (If the write landed and only its answer was lost, the
// count errs on the high side, never the low one.)
func (b *Budget) requeue(key string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state(key)
	st.pending += n
	b.schedule(key, st)
}

// addN adds n to key with a compare-and-set, creating it with limit if
// needed, and returns the usage written.
func (b *Budget) addN(ctx context.Context, key string, n, limit int64) (Usage, error) {
	b.mu.Lock()
	st := b.state(key)
	cur, known := st.last, st.known
	b.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return Usage{}, err
		}
		if !known {
			var err error
			cur, err = b.get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				cur = Usage{Limit: limit} // revision 0: write creates it
			case err != nil:
				return Usage{}, err
			}
		}
		stored, again, err := b.write(ctx, key, Usage{ToolCalls: cur.ToolCalls + n, Limit: cur.Limit, Revision: cur.Revision})
		if err != nil || !again {
			return stored, err
		}
		known = false // someone else counted (or created it first): re-read and try again
	}
}

// Get returns the current usage of session and task; a key never counted is
// the zero Usage. Counts this Budget deferred for the key are written
// first, so within one process Get sees every count taken before it.
func (b *Budget) Get(ctx context.Context, session, task string) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, err
	}
	if err := b.flushKey(ctx, key); err != nil {
		return Usage{}, err
	}
	u, err := b.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Usage{}, nil
	}
	return u, err
}

// SetLimit sets the limit of session and task (0 = no limit), keeping the
// count. It creates the key with a zero count if needed.
func (b *Budget) SetLimit(ctx context.Context, session, task string, limit int64) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, err
	}
	for {
		cur, err := b.get(ctx, key)
		next := Usage{Limit: limit}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return Usage{}, err
		default:
			next.ToolCalls, next.Revision = cur.ToolCalls, cur.Revision
		}
		stored, again, err := b.write(ctx, key, next)
		if err != nil || !again {
			return stored, err
		}
	}
}

func (b *Budget) get(ctx context.Context, key string) (Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, b.attempt)
	defer cancel()
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Usage{}, err
	}
	if err != nil {
		return Usage{}, fmt.Errorf("stream: budget %s: %w", key, err)
	}
	var u Usage
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return Usage{}, fmt.Errorf("stream: decode budget %s: %w", key, err)
	}
	u.Revision = e.Revision()
	return u, nil
}

// remember keeps u as the latest known value of key unless a newer
// revision is known already.
func (b *Budget) remember(key string, u Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state(key)
	if !st.known || u.Revision >= st.last.Revision {
		st.last, st.known = u, true
	}
}

func mustJSON(u Usage) []byte {
	b, _ := json.Marshal(u) // two integers: cannot fail
	return b
}

// token reports whether s is 1–128 bytes of [A-Za-z0-9_-].
func token(s string) bool { return schema.ValidSession(s) }

// CallsPerTask counts the tool.call events of each task in a history: the
// attempts a session has recorded, which every tool_calls count must cover
// (see Reconcile). Legacy calls without an operation have no task and are
// not counted.
func CallsPerTask(h []schema.Event) map[string]int64 {
	n := make(map[string]int64)
	for i := range h {
		if c := h[i].Call; c != nil && h[i].Type == schema.TypeCall && c.Operation != nil {
			n[c.Operation.Task]++
		}
	}
	return n
}
