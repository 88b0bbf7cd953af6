package recoverer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// takeovers is the recoverer's lease service: it watches the expiry of
// session and partition leases and takes over (fence, load) the sessions
// whose writer is gone with calls open, in parallel with a bounded pool;
// it reconciles at start what expired while no recoverer ran. It
// publishes no assessment of a fenced call itself: the classifier does,
// when it reads the fence (one path per call outcome); only a log too
// full for a fence, which no fence will ever close, is assessed here.
type takeovers struct {
	*base
	pub   *publisher
	track *tracker // the classifier's open calls: where a storm's sessions are found

	expired    <-chan string // session lease watcher; nil once it stopped
	partitions <-chan int    // partition lease watcher; nil once it stopped

	mu sync.Mutex
	// live holds, by partition, the sessions with open calls that the
	// start's reconcile left to a live writer: checked again when that
	// partition's lease expires (the classifier does not track calls an
	// earlier run saw opened).
	live map[int]map[string]struct{}
	// storms counts partition expiries handled and sessions fenced.
	storms, fenced uint64
	storm          sync.WaitGroup // partition expiries being handled
	budgets        sync.WaitGroup // budget reconciles after takeovers
	poolOnce       sync.Once
	pool           chan struct{} // Config.Parallelism takeovers at once

	// fault, when not nil, is asked before each takeover of a session;
	// an error it returns is that takeover's (tests: a cluster without a
	// stream leader for a while).
	fault func(session string) error
	// missExpiries, in tests, drops what the partition-lease watcher
	// reports (a watcher on a node that died hears nothing): only the
	// sweep finds the expiries then.
	missExpiries bool
	// held is, by partition, the holder (owner and acquisition epoch; the
	// zero value: no lease) the last sweep saw; only the run goroutine
	// uses it.
	held map[int]partitionHolder
	// handled is, by partition, when an expiry of it was last handled
	// (from the watcher or the sweep; guarded by mu): the sweep leaves a
	// partition handled within the last two lease TTLs alone.
	handled map[int]time.Time
}

// partitionHolder identifies one acquisition of a partition's lease.
type partitionHolder struct {
	owner string
	base  uint64
}

// start watches lease expiry, then reconciles: watching first, so that no
// expiry falls between the two.
func (r *takeovers) start(ctx context.Context) error {
	expired, err := r.t.Leases().WatchLeaseExpiry(ctx)
	if err != nil {
		return err
	}
	var parts <-chan int
	if r.t.Names().Partitions() > 0 {
		if parts, err = r.t.Leases().WatchPartitionExpiry(ctx); err != nil {
			return err
		}
	}
	if err := r.reconcile(ctx); err != nil {
		return err
	}
	r.expired, r.partitions = expired, parts
	return nil
}

// run takes over the sessions the watchers report until one stops (a lost
// connection); run again, it watches again and reconciles what expired in
// between.
func (r *takeovers) run(ctx context.Context) error {
	if r.expired == nil {
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	defer func() { r.expired, r.partitions = nil, nil }()
	defer r.budgets.Wait()
	defer r.storm.Wait()
	sweep := time.NewTicker(max(r.t.Config().LeaseTTL, time.Second))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sweep.C:
			r.sweepPartitions(ctx)
		case s, ok := <-r.expired:
			if !ok {
				return errors.New("lease watcher stopped")
			}
			if s == CountingLease {
				continue // no session: the recovery workers' counting lease
			}
			r.log.Info().Str("session", s).Msg("lease expired")
			if err := r.takeOverIfOpen(ctx, s, nil); err != nil && ctx.Err() == nil {
				r.log.Error().Err(err).Str("session", s).Msg("takeover after lease expiry failed")
			}
		case p, ok := <-r.partitions:
			if !ok {
				return errors.New("partition lease watcher stopped")
			}
			if r.missExpiries {
				continue
			}
			// Partitions expire together when their owner dies: each
			// is handled at once, their sessions sharing one bounded
			// pool.
			r.storm.Add(1)
			go func() {
				defer r.storm.Done()
				r.partitionExpired(ctx, p)
			}()
		}
	}
}

// sweepPartitions is the backstop of the partition-lease watcher, whose
// consumer, when it sat on a node that died or was cut off, reports
// nothing until it is recreated (the slowest crash → assessment samples of
// the cluster chaos runs): every lease TTL it reads the partition leases
// (one listing) and handles as an expiry every partition with open calls
// whose lease is gone, or was acquired again since the last sweep (another
// holder, or the same at a new acquisition epoch). Handling an expiry twice
// is harmless: a takeover fences only while nobody may still write the
// session, and a fence closes only what is still open.
func (r *takeovers) sweepPartitions(ctx context.Context) {
	if r.t.Names().Partitions() == 0 {
		return
	}
	open := map[int]bool{}
	for _, s := range r.track.openSessions() {
		open[r.t.Names().PartitionOf(s)] = true
	}
	r.mu.Lock()
	for p := range r.live {
		open[p] = true
	}
	r.mu.Unlock()
	if len(open) == 0 {
		return
	}
	leases, err := r.t.Leases().PartitionLeases(ctx)
	if err != nil {
		r.log.Debug().Err(err).Msg("partition sweep: leases not read")
		return
	}
	if r.held == nil {
		r.held = make(map[int]partitionHolder)
	}
	for p := range open {
		var cur partitionHolder
		if lv, ok := leases[p]; ok {
			cur = partitionHolder{owner: lv.Owner, base: lv.Base}
			if cur.base == 0 {
				cur.base = lv.Epoch
			}
		}
		prev, known := r.held[p]
		r.held[p] = cur
		unheld := cur == partitionHolder{}
		if !unheld && (!known || prev == cur) {
			continue // held, by the holder seen before (or first seen now)
		}
		r.mu.Lock()
		recent := time.Since(r.handled[p]) < 2*r.t.Config().LeaseTTL
		r.mu.Unlock()
		if recent {
			continue // the watcher reported this expiry (or a sweep just did)
		}
		lvl := r.log.Info()
		if unheld && known && prev == cur {
			lvl = r.log.Debug() // still unowned: tried again, quietly
		}
		lvl.Int("partition", p).Str("holder", cur.owner).Msg("partition sweep: lease gone or taken again with calls open; taking them over")
		r.storm.Add(1)
		go func() {
			defer r.storm.Done()
			r.partitionExpired(ctx, p)
		}()
	}
}

// partitionExpired takes over, in parallel, every session of partition p
// with open calls: those the classifier tracks and those the start's
// reconcile left to the partition's owner. A session a live owner writes
// again is left to it (stream.Leases.RecoveryHolds).
func (r *takeovers) partitionExpired(ctx context.Context, p int) {
	t0 := time.Now()
	set := map[string]struct{}{}
	for _, s := range r.track.openSessions() {
		if r.t.Names().PartitionOf(s) == p {
			set[s] = struct{}{}
		}
	}
	r.mu.Lock()
	for s := range r.live[p] {
		set[s] = struct{}{}
	}
	delete(r.live, p)
	r.storms++
	if r.handled == nil {
		r.handled = make(map[int]time.Time)
	}
	r.handled[p] = t0
	r.mu.Unlock()
	sessions := make([]string, 0, len(set))
	for s := range set {
		sessions = append(sessions, s)
	}
	// Known to have had open calls: fenced without reading the log first
	// (the takeover reads it once, after its fence).
	n := r.parallel(ctx, sessions, func(ctx context.Context, s string) (bool, error) {
		return r.fenceRetrying(ctx, s)
	})
	r.log.Info().Int("partition", p).Int("sessions", len(sessions)).Int("fenced", n).Dur("took", time.Since(t0)).Msg("partition lease expired: sessions with open calls taken over")
}

// parallel runs f on every session, with at most Config.Parallelism
// sessions at once over all the calls of parallel running together, and
// returns how many returned true. Failures are logged.
func (r *takeovers) parallel(ctx context.Context, sessions []string, f func(context.Context, string) (bool, error)) int {
	r.poolOnce.Do(func() { r.pool = make(chan struct{}, r.cfg.Parallelism) })
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	for _, s := range sessions {
		select {
		case r.pool <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.pool }()
			ok, err := f(ctx, s)
			if err != nil && ctx.Err() == nil {
				r.log.Error().Err(err).Str("session", s).Msg("takeover failed")
			}
			if ok {
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return done
}

// reconcileEvents bounds the events of the histories the start's
// reconcile holds at once (one history at the default limit of
// schema.MaxHistoryEvents always fits).
const reconcileEvents = schema.MaxHistoryEvents

// takeoverRetryFor bounds how long a partition expiry's takeover of one
// session is tried again after it failed.
const takeoverRetryFor = 20 * time.Second

// takeoverRetryFirst and takeoverRetryMax are the first and the longest
// wait (before a ±20 % jitter) between two attempts of a takeover that
// failed. The cap is short on purpose: what fails is a cluster electing a
// stream leader (nats-server's raft: 4–9 s, not configurable), each
// attempt costs one request answered at once with a 503, and every
// millisecond between the new leader's election and the next attempt is
// added to the crash → assessment time (a 1 s cap, jittered to 1.5 s, was
// up to a second and a half of it in the cluster chaos runs).
const (
	takeoverRetryFirst = 50 * time.Millisecond
	takeoverRetryMax   = 250 * time.Millisecond
)

// fenceRetrying is fence tried again with backoff (takeoverRetryFirst up
// to takeoverRetryMax) while it fails for up to takeoverRetryFor: a cluster that lost a node or was partitioned answers
// 503 (no stream leader) for a few seconds, and a takeover given up then
// would leave the session's calls open until the partition's next owner
// fences it or the next start reconciles (the chaos run's slowest crash →
// assessment samples). A refusal for good (a *schema.Error) is not tried
// again. Each attempt checks again that nobody may still write the
// session; a fence appended by an attempt that failed after it is
// harmless to the next (it closes nothing the first did not).
func (r *takeovers) fenceRetrying(ctx context.Context, session string) (bool, error) {
	b := newBackoff(takeoverRetryFirst, takeoverRetryMax, takeoverRetryFor)
	b.RandomizationFactor = 0.2
	b.Reset()
	for {
		ok, err := r.fence(ctx, session, nil)
		var se *schema.Error
		if err == nil || ctx.Err() != nil || errors.As(err, &se) {
			return ok, err
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return ok, err
		}
		r.log.Warn().Err(err).Str("session", session).Dur("retry_in", d).Msg("takeover failed; trying again")
		select {
		case <-ctx.Done():
			return ok, ctx.Err()
		case <-time.After(d):
		}
	}
}

// takeOverIfOpen is takeOverOpen with the result dropped.
func (r *takeovers) takeOverIfOpen(ctx context.Context, session string, leftLive func(string)) error {
	_, err := r.takeOverOpen(ctx, session, leftLive)
	return err
}

// takeOverOpen takes the session over if its log has open calls and
// nobody may still write it (stream.Logs.Writer); it reports whether
// it fenced. A session left to a live writer is passed to leftLive (when
// not nil).
func (r *takeovers) takeOverOpen(ctx context.Context, session string, leftLive func(string)) (bool, error) {
	loaded, err := r.t.Logs().LoadHistory(ctx, session)
	if err != nil {
		return false, err
	}
	if len(recovery.OpenIn(loaded.Events, 0)) == 0 {
		return false, nil
	}
	return r.fence(ctx, session, leftLive, stream.WithLoaded(loaded))
}

// fence takes the session over (takeOver) unless a live writer may still
// write it (passed to leftLive when not nil) or a new owner fenced it
// first; it reports whether it fenced.
func (r *takeovers) fence(ctx context.Context, session string, leftLive func(string), opts ...stream.TakeoverOption) (bool, error) {
	_, _, err := r.takeOver(ctx, session, opts...)
	if errors.Is(err, stream.ErrLeaseHeld) {
		r.log.Debug().Str("session", session).Err(err).Msg("session written by a live owner; left to it")
		if leftLive != nil {
			leftLive(session)
		}
		return false, nil
	}
	if errors.Is(err, stream.ErrFenced) {
		// A new owner fenced it first: its fence closed the calls.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	r.fenced++
	r.mu.Unlock()
	return true, nil
}

// takeOver is Recoverer.TakeOver; it also returns the confirmed history.
// opts pass a history the caller loaded just before (stream.WithLoaded),
// so that only what follows it is read after the fence. The session is
// fenced at the epoch just above its log's (stream.RecoveryHolds), which
// is below the epoch of any later owner of its partition, and only while
// nobody may still write it (ErrLeaseHeld otherwise). The assessments of
// the calls the fence closed are returned, not published: the classifier
// publishes them when it reads the fence.
func (r *takeovers) takeOver(ctx context.Context, session string, opts ...stream.TakeoverOption) ([]schema.Assessment, []schema.Event, error) {
	if err := r.identity.current(); err != nil { // a replaced stream: stream_replaced
		return nil, nil, err
	}
	ctx, endSpan := r.startTakeoverSpan(ctx, session)
	defer endSpan()
	if r.fault != nil {
		if err := r.fault(session); err != nil {
			return nil, nil, fmt.Errorf("recoverer: take over %s: %w", session, err)
		}
	}
	tk, err := r.t.Leases().TakeOver(ctx, session, r.cfg.Owner, r.t.Leases().RecoveryHolds(), opts...)
	var h []schema.Event
	var epoch, fenceSeq uint64
	closed := false
	switch {
	case errors.Is(err, stream.ErrLogClosed):
		// No room left even for a fence: nobody can append to the log any
		// more, so it is confirmed as it stands; every call open at its
		// end is final, and no fence will ever tell the classifier.
		if h, err = r.t.Logs().Load(ctx, session); err != nil {
			return nil, nil, fmt.Errorf("recoverer: load closed %s: %w", session, err)
		}
		closed = true
		r.log.Info().Str("session", session).Int("events", len(h)).Msg("session log full: confirmed without a fence")
	case err != nil:
		return nil, nil, fmt.Errorf("recoverer: take over %s: %w", session, err)
	default:
		defer func() {
			if err := tk.Hold.Release(context.WithoutCancel(ctx)); err != nil {
				r.log.Warn().Err(err).Str("session", session).Msg("release hold after takeover")
			}
		}()
		h, epoch, fenceSeq = tk.History, tk.Hold.Epoch(), tk.FenceSeq
	}
	r.log.Info().Str("session", session).Uint64("epoch", epoch).Uint64("fence_seq", fenceSeq).Msg("session taken over")
	r.noteTakeover(ctx, session, epoch, fenceSeq, h)
	// The tool_calls counts are reconciled beside the rest, not before
	// it returns: nothing waits for them (the classifier assesses the
	// fenced calls when it reads the fence, whatever this does), and a
	// jw_budget without a leader (a node lost) held every takeover — and
	// the start's reconcile, and with it the lease watch — for a request
	// timeout of 5 s.
	counts := stream.CallsPerTask(h) // not h itself: the goroutine must not keep the history alive
	r.budgets.Add(1)
	go func() {
		defer r.budgets.Done()
		r.reconcileBudget(ctx, session, counts)
	}()
	var out []schema.Assessment
	var err2 error
	if closed {
		out, err2 = r.pub.publishOpen(ctx, session, h, recovery.OpenIn(h, 0))
	} else {
		for _, id := range recovery.OpenIn(h, fenceSeq) {
			if a, err := inspect(h, id); err == nil {
				out = append(out, a)
			}
		}
	}
	if o := r.cfg.Observer; o != nil {
		o.TookOver(session, h, out)
	}
	return out, h, err2
}

// reconcile takes over every session that has open calls and nobody who
// may still write it (Recoverer.Reconcile), in parallel. It reads the list
// of sessions from JW_EVENTS; sessions left to a live partition owner are
// remembered and checked again when that partition's lease expires.
func (r *takeovers) reconcile(ctx context.Context) error {
	info, err := r.t.Events.Info(ctx, jetstream.WithSubjectFilter(r.t.Names().EventsSubject("*")))
	if err != nil {
		return fmt.Errorf("recoverer: list sessions: %w", err)
	}
	pre := r.t.Names().EventsSubject("")
	sessions := make([]string, 0, len(info.State.Subjects))
	events := make(map[string]int64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		s := strings.TrimPrefix(subj, pre)
		sessions = append(sessions, s)
		events[s] = min(int64(n), reconcileEvents)
	}
	// Each session's whole history is loaded to see whether it has open
	// calls: at most reconcileEvents events of them are held at once,
	// whatever Parallelism says (128 sessions of 10,000 events loaded
	// together peaked at 630 MiB in the memory benchmark).
	held := semaphore.NewWeighted(reconcileEvents)
	leftLive := func(s string) {
		if r.t.Names().Partitions() == 0 {
			return
		}
		p := r.t.Names().PartitionOf(s)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.live == nil {
			r.live = map[int]map[string]struct{}{}
		}
		if r.live[p] == nil {
			r.live[p] = map[string]struct{}{}
		}
		r.live[p][s] = struct{}{}
	}
	n := r.parallel(ctx, sessions, func(ctx context.Context, s string) (bool, error) {
		w := max(events[s], 1)
		if err := held.Acquire(ctx, w); err != nil {
			return false, err
		}
		defer held.Release(w)
		return r.takeOverOpen(ctx, s, leftLive)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.log.Info().Int("sessions", len(sessions)).Int("fenced", n).Msg("reconciled")
	return nil
}

// reconcileBudget raises every task's tool_calls count in jw_budget to at
// least counts, the tool.call events of each task in a confirmed history
// (stream.CallsPerTask): a
// writer that crashed may not have written the counts it kept off its call
// path, and every recorded attempt counts. Counts never go down. Failures
// are logged: the next owner of the session reconciles again.
func (r *takeovers) reconcileBudget(ctx context.Context, session string, counts map[string]int64) {
	b := stream.NewBudget(r.t.Budget)
	for task, n := range counts {
		if _, err := b.Reconcile(ctx, session, task, n, 0); err != nil {
			r.log.Warn().Err(err).Str("session", session).Str("task", task).Msg("tool_calls count not reconciled after takeover")
		}
	}
}
