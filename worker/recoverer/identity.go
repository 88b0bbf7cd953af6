package recoverer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jingwei/jingwei/stream"
)

// identityGuard compares the protected streams with the identity setup
// recorded (stream.CheckIdentity): all of them at start and every
// Config.IdentityInterval, and before every prepare the three it decides
// from (the session logs, the reviews, the plans bucket), against the
// record read last. While a stream differs, prepare and takeovers refuse
// with stream_replaced (stream.ReplacedError), each change is logged, and
// ReplacedStreams says which (a metric). Safe for concurrent use.
type identityGuard struct {
	*base
	mu       sync.Mutex
	record   *stream.IdentityRecord // read by the last full check; nil before
	problems []stream.IdentityProblem
}

// check reads the record and compares every protected stream now, and
// keeps the answer; a failed read keeps the last one and returns the
// error.
func (g *identityGuard) check(ctx context.Context) ([]stream.IdentityProblem, error) {
	rec, err := stream.ReadIdentityRecord(ctx, g.t.JS, g.t.Prefix)
	if err != nil {
		return nil, err
	}
	ps, err := rec.Check(ctx, g.t.JS)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.record = &rec
	g.mu.Unlock()
	g.set(ps)
	return ps, nil
}

// set keeps ps as the problems found, and logs what changed.
func (g *identityGuard) set(ps []stream.IdentityProblem) {
	g.mu.Lock()
	before := g.problems
	g.problems = ps
	g.mu.Unlock()
	for _, p := range ps {
		if !slices.Contains(before, p) {
			g.log.Error().Str("stream", p.Stream).Str("reason", p.Reason).Str("code", "stream_replaced").
				Msg("protected stream lost its history since setup recorded its identity: prepare and takeovers refused until an operator runs `jingwei setup --confirm-replaced " + p.Stream + "`")
		}
	}
	if len(ps) == 0 && len(before) > 0 {
		g.log.Info().Msg("protected streams match their recorded identity again: prepare and takeovers resume")
	}
}

// decidesFrom are the streams prepare reads its decision from, compared
// again before each prepare: the session logs, the reviews and the plans
// bucket (the others are compared every Config.IdentityInterval).
func (g *identityGuard) decidesFrom() []string {
	return []string{g.t.StreamName("EVENTS"), g.t.StreamName("REVIEWS"), "KV_" + g.t.Prefix + "_plans"}
}

// verify compares the streams prepare decides from now (every stream,
// and the record read again, the first time and while any differs):
// stream_replaced while one differs, the read error if they could not be
// read.
func (g *identityGuard) verify(ctx context.Context) error {
	g.mu.Lock()
	rec := g.record
	g.mu.Unlock()
	if rec == nil {
		ps, err := g.check(ctx)
		if err != nil {
			return err
		}
		return stream.ReplacedError(ps)
	}
	names := g.decidesFrom()
	ps, err := rec.Check(ctx, g.t.JS, names...)
	if err != nil {
		return err
	}
	if len(ps) > 0 || len(g.replaced()) > 0 {
		// The record may have changed since it was read (an operator
		// confirmed a stream): read it again, and every stream.
		if ps, err = g.check(ctx); err != nil {
			return err
		}
	}
	return stream.ReplacedError(ps)
}

// current is stream_replaced if the last comparison found a stream that
// differs (no request).
func (g *identityGuard) current() error {
	return stream.ReplacedError(g.replaced())
}

func (g *identityGuard) replaced() []stream.IdentityProblem {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.problems)
}

// run compares the streams every Config.IdentityInterval until ctx is
// done; a failed read is logged and tried again at the next tick.
func (g *identityGuard) run(ctx context.Context) error {
	tick := time.NewTicker(g.cfg.IdentityInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, err := g.check(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn().Err(err).Msg("protected streams not compared with their identity; tried again")
			}
		}
	}
}

// ReplacedStreams returns the protected streams that, when last compared,
// differed from the identity setup recorded (none while all match): while
// any does, prepare and takeovers refuse with stream_replaced.
func (r *Recoverer) ReplacedStreams() []stream.IdentityProblem { return r.identity.replaced() }

// ProtectedStreams returns the streams the recoverer compares with their
// recorded identity (stream.ProtectedStreams).
func (r *Recoverer) ProtectedStreams() []string { return stream.ProtectedStreams(r.t.Prefix) }
