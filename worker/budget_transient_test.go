package worker_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// flakyCounter answers 503 (as jw_budget does while its stream has no
// leader) for its first fail writes; like *stream.Budget, a failed count
// stays pending and Get flushes it.
type flakyCounter struct {
	mu      sync.Mutex
	fail    int
	pending int64
	stored  int64
	writes  int
}

var err503 = &jetstream.APIError{Code: http.StatusServiceUnavailable, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}

func (c *flakyCounter) write() (stream.Usage, error) {
	c.writes++
	if c.fail != 0 {
		if c.fail > 0 {
			c.fail--
		}
		return stream.Usage{}, err503
	}
	c.stored += c.pending
	c.pending = 0
	return stream.Usage{ToolCalls: c.stored}, nil
}

func (c *flakyCounter) Add(context.Context, string, string, int64) (stream.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending++
	return c.write()
}

func (c *flakyCounter) Get(context.Context, string, string) (stream.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.write()
}

// TestBudget503IsTransient: jw_budget answering 503 for a while is ridden
// out (the call runs, counted exactly once); answering 503 for the whole
// WriteTimeout leaves the call open and not started — never
// rejected:budget.
func TestBudget503IsTransient(t *testing.T) {
	t.Run("passes", func(t *testing.T) {
		c := &flakyCounter{fail: 3}
		f := setup(t, worker.Tool{Body: okBody()}, func(cfg *worker.Config) { cfg.Budget = c })
		res, err := f.rt.Call(context.Background(), "probe", []byte(`{}`))
		if err != nil || res.Status != schema.StatusOK {
			t.Fatalf("call: %+v %v, want ok after the 503s", res, err)
		}
		if c.stored != 1 || c.writes != 4 {
			t.Fatalf("stored %d after %d writes, want 1 count after 4", c.stored, c.writes)
		}
	})
	t.Run("stays down", func(t *testing.T) {
		c := &flakyCounter{fail: -1}
		f := setup(t, worker.Tool{Body: okBody()}, func(cfg *worker.Config) { cfg.Budget = c; cfg.WriteTimeout = 300 * time.Millisecond })
		res, err := f.rt.Call(context.Background(), "probe", []byte(`{}`))
		if res.Status == schema.StatusRejected || schema.CodeOf(err) == schema.CodeRejected {
			t.Fatalf("call rejected (%s) on a 503: %v", res.Stage, err)
		}
		if schema.CodeOf(err) != schema.CodeLog || !errors.Is(err, err503) {
			t.Fatalf("call: %v, want a log error wrapping the 503", err)
		}
		if got := f.log.types(); got != schema.TypeCall {
			t.Fatalf("log %s, want only the tool.call (open, not started)", got)
		}
		if f.runs.Load() != 0 {
			t.Fatal("body ran without a count")
		}
	})
}
