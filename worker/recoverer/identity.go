package recoverer

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream"
)

// identityFresh is how long a comparison that found every stream as
// recorded answers prepare without asking the server again, as long as no
// stream advisory came in since it started (identityGuard.verify).
const identityFresh = 250 * time.Millisecond

// identityGuard compares the protected streams with the identity setup
// recorded (stream.CheckIdentity): all of them at start and every
// Config.IdentityInterval, and before every prepare the three it decides
// from (the session logs, the reviews, the plans bucket), against the
// record read last. While a stream differs, prepare and takeovers refuse
// with stream_replaced (stream.ReplacedError), each change is logged, and
// ReplacedStreams says which (a metric). Safe for concurrent use.
//
// The server's advisories of the protected streams (created, deleted,
// updated: $JS.EVENT.ADVISORY.STREAM.<what>.<stream>) reach the guard as
// they happen (watch): each one makes the next prepare compare again, and
// starts a full comparison at once. Between advisories, a comparison that
// found everything as recorded answers the prepares of the next
// identityFresh without a request (concurrent prepares share one
// comparison), so a prepare does not pay three stream infos.
type identityGuard struct {
	*base
	mu       sync.Mutex
	record   *stream.IdentityRecord // read by the last full check; nil before
	problems []stream.IdentityProblem

	// gen counts the advisories of protected streams seen (watch).
	gen atomic.Uint64
	// vmu makes concurrent verifies share one comparison.
	vmu sync.Mutex
	// okAt and okGen (under mu) are when the last comparison that found
	// every stream as recorded started, and gen then.
	okAt  time.Time
	okGen uint64
	// wake asks run for a full comparison now.
	wake chan struct{}
}

// watch subscribes to the server's advisories of the protected streams;
// each bumps the guard's generation (the next prepare compares again) and
// wakes run for a full comparison. The subscription ends with ctx.
func (g *identityGuard) watch(ctx context.Context) error {
	nc := g.t.JS.Conn()
	protected := stream.ProtectedStreams(g.t.Prefix)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.>", func(m *nats.Msg) {
		// $JS.EVENT.ADVISORY.STREAM.<what>.<stream>
		what, name, ok := strings.Cut(strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM."), ".")
		if !ok || !slices.Contains(protected, name) || (what != "CREATED" && what != "DELETED" && what != "UPDATED") {
			return
		}
		g.gen.Add(1)
		g.log.Warn().Str("stream", name).Str("advisory", what).Msg("protected stream changed: compared with its recorded identity again")
		select {
		case g.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}

// check reads the record and compares every protected stream now, and
// keeps the answer; a failed read keeps the last one and returns the
// error.
func (g *identityGuard) check(ctx context.Context) ([]stream.IdentityProblem, error) {
	at, gen := time.Now(), g.gen.Load()
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
	if len(ps) == 0 {
		g.matched(at, gen)
	}
	return ps, nil
}

// matched notes that a comparison started at at, with the generation gen,
// found every stream it compared as recorded.
func (g *identityGuard) matched(at time.Time, gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if at.After(g.okAt) {
		g.okAt, g.okGen = at, gen
	}
}

// fresh reports whether the last comparison that found everything as
// recorded is younger than identityFresh, no stream differed since and no
// advisory came in since it started.
func (g *identityGuard) fresh() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.record != nil && len(g.problems) == 0 && g.okGen == g.gen.Load() && time.Since(g.okAt) < identityFresh
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
	return []string{g.t.Names().StreamName("EVENTS"), g.t.Names().StreamName("REVIEWS"), "KV_" + g.t.Prefix + "_plans"}
}

// verify compares the streams prepare decides from now (every stream,
// and the record read again, the first time and while any differs):
// stream_replaced while one differs, the read error if they could not be
// read.
func (g *identityGuard) verify(ctx context.Context) error {
	if g.fresh() {
		return nil
	}
	g.vmu.Lock()
	defer g.vmu.Unlock()
	if g.fresh() { // another prepare compared while this one waited
		return nil
	}
	at, gen := time.Now(), g.gen.Load()
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
		return stream.ReplacedError(ps)
	}
	g.matched(at, gen)
	return nil
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

// run compares the streams every Config.IdentityInterval, and at once
// after an advisory of a protected stream, until ctx is done; a failed
// read is logged and tried again at the next tick.
func (g *identityGuard) run(ctx context.Context) error {
	tick := time.NewTicker(g.cfg.IdentityInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-g.wake: // an advisory of a protected stream
		}
		if _, err := g.check(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn().Err(err).Msg("protected streams not compared with their identity; tried again")
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
