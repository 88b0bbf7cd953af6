package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// ErrInvalidBudgetKey is returned for a session or task that cannot be part
// of a jw_budget key: both must be 1–128 bytes of [A-Za-z0-9_-].
var ErrInvalidBudgetKey = errors.New("stream: invalid budget key")

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

// Budget counts tool calls per session and task in the jw_budget bucket.
// Every increment is a compare-and-set on the key's revision, retried on a
// mismatch, so counts are exact across goroutines and processes; nothing is
// ever refunded. Safe for concurrent use; build it with NewBudget.
type Budget struct {
	kv jetstream.KeyValue

	mu   sync.Mutex
	last map[string]Usage // last value seen per key: a hint, never trusted
}

// NewBudget returns a budget store on kv (normally Topology.Budget).
func NewBudget(kv jetstream.KeyValue) *Budget {
	return &Budget{kv: kv, last: make(map[string]Usage)}
}

// BudgetKey returns the jw_budget key "<session>.<task>", or
// ErrInvalidBudgetKey.
func BudgetKey(session, task string) (string, error) {
	if !token(session) || !token(task) {
		return "", fmt.Errorf("%w: session %q, task %q (want 1-128 bytes of [A-Za-z0-9_-])", ErrInvalidBudgetKey, session, task)
	}
	return session + "." + task, nil
}

// Add counts one tool call for session and task and returns the usage after
// the increment. A key that does not exist yet is created with limit
// (0 = no limit); the limit of an existing key is kept. The caller decides
// what an over-limit usage means (see Usage.Over); the count stands either
// way.
func (b *Budget) Add(ctx context.Context, session, task string, limit int64) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
		return Usage{}, err
	}
	b.mu.Lock()
	cur, known := b.last[key]
	b.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return Usage{}, err
		}
		if !known {
			cur, err = b.get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				next := Usage{ToolCalls: 1, Limit: limit}
				rev, cerr := b.kv.Create(ctx, key, mustJSON(next))
				if errors.Is(cerr, jetstream.ErrKeyExists) {
					continue // another writer created it first: read and add
				}
				if cerr != nil {
					return Usage{}, fmt.Errorf("stream: budget %s: %w", key, cerr)
				}
				next.Revision = rev
				b.remember(key, next)
				return next, nil
			case err != nil:
				return Usage{}, err
			}
			known = true
		}
		next := Usage{ToolCalls: cur.ToolCalls + 1, Limit: cur.Limit}
		rev, err := b.kv.Update(ctx, key, mustJSON(next), cur.Revision)
		if err == nil {
			next.Revision = rev
			b.remember(key, next)
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !planCASConflict(err) {
			return Usage{}, fmt.Errorf("stream: budget %s: %w", key, err)
		}
		known = false // someone else counted: re-read and try again
	}
}

// Get returns the current usage of session and task; a key never counted is
// the zero Usage.
func (b *Budget) Get(ctx context.Context, session, task string) (Usage, error) {
	key, err := BudgetKey(session, task)
	if err != nil {
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
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			next := Usage{Limit: limit}
			rev, cerr := b.kv.Create(ctx, key, mustJSON(next))
			if errors.Is(cerr, jetstream.ErrKeyExists) {
				continue
			}
			if cerr != nil {
				return Usage{}, fmt.Errorf("stream: budget %s: %w", key, cerr)
			}
			next.Revision = rev
			b.remember(key, next)
			return next, nil
		}
		if err != nil {
			return Usage{}, err
		}
		next := Usage{ToolCalls: cur.ToolCalls, Limit: limit}
		rev, err := b.kv.Update(ctx, key, mustJSON(next), cur.Revision)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || planCASConflict(err) {
			continue
		}
		if err != nil {
			return Usage{}, fmt.Errorf("stream: budget %s: %w", key, err)
		}
		next.Revision = rev
		b.remember(key, next)
		return next, nil
	}
}

func (b *Budget) get(ctx context.Context, key string) (Usage, error) {
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

func (b *Budget) remember(key string, u Usage) {
	b.mu.Lock()
	b.last[key] = u
	b.mu.Unlock()
}

func mustJSON(u Usage) []byte {
	b, _ := json.Marshal(u) // two integers: cannot fail
	return b
}

// token reports whether s is 1–128 bytes of [A-Za-z0-9_-].
func token(s string) bool { return schema.ValidSession(s) }
