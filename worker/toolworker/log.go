package toolworker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// guardedLog is the worker's Appender for one owned session: it refuses
// every append once the session is lost (lease lost, not renewed within its
// TTL, or fenced), and reports each recorded tool.call.
type guardedLog struct {
	log    *stream.Log
	onCall func(*schema.Call) // called after a tool.call is acknowledged
	onLost func(error)        // called once when the session is lost

	mu    sync.Mutex
	until time.Time // the lease is ours until then, by our clock
	err   error     // permanent: why the session was lost
}

// extend records a successful lease write started at t0.
func (g *guardedLog) extend(t0 time.Time, ttl time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.until = t0.Add(ttl)
	}
}

// expired reports whether the lease has run out by our clock.
func (g *guardedLog) expired(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !now.Before(g.until)
}

// lose stops the log for good with err (wrapped so that it matches both
// ErrSessionLost and stream.ErrFenced) and calls onLost once.
func (g *guardedLog) lose(err error) {
	g.mu.Lock()
	first := g.err == nil
	if first {
		if !errors.Is(err, stream.ErrFenced) {
			err = fmt.Errorf("%w: %w (%w)", ErrSessionLost, stream.ErrFenced, err)
		} else if !errors.Is(err, ErrSessionLost) {
			err = fmt.Errorf("%w: %w", ErrSessionLost, err)
		}
		g.err = err
	}
	g.mu.Unlock()
	if first && g.onLost != nil {
		g.onLost(err)
	}
}

// lost returns the error that stopped the log, or nil.
func (g *guardedLog) lost() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Append appends ev unless the session is lost.
func (g *guardedLog) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	if err := g.lost(); err != nil {
		return 0, err
	}
	if g.expired(time.Now()) {
		err := fmt.Errorf("%w: lease of %s not renewed within its TTL", ErrSessionLost, g.log.Session())
		g.lose(err)
		return 0, g.lost()
	}
	seq, err := g.log.Append(ctx, ev)
	if err != nil {
		if errors.Is(err, stream.ErrFenced) || errors.Is(err, stream.ErrConflict) {
			g.lose(err)
			return 0, g.lost()
		}
		return 0, err
	}
	if ev.Type == schema.TypeCall && ev.Call != nil && g.onCall != nil {
		g.onCall(ev.Call)
	}
	return seq, nil
}

// Epoch returns the epoch of the session log (what the runtime records
// with a plan's consumption).
func (g *guardedLog) Epoch() uint64 { return g.log.Epoch() }

// Room returns how much the log may still hold (stream.Log.Room).
func (g *guardedLog) Room() (int, int64) { return g.log.Room() }

// LastSeq returns the sequence of the log's last message.
func (g *guardedLog) LastSeq() uint64 { return g.log.LastSeq() }
