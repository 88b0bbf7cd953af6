package toolworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/stream"
)

// pullWait bounds one pull of a partition's consumers: short, so that a
// drain stops fetching quickly and the consumer's InactiveThreshold can be
// sized to the lease TTL.
const pullWait = time.Second

// pullBatch is how many messages one pull asks for.
const pullBatch = 64

func isHeld(err error) bool { return errors.Is(err, stream.ErrLeaseHeld) }

// partition is one partition the worker owns: its lease hold, its request
// and plan consumers, and the sessions of it held in memory. Each session
// runs its work one item at a time in its own goroutine; sessions run in
// parallel, bounded by the worker's slots.
type partition struct {
	w      *Worker
	p      int
	log    zerolog.Logger
	drainc chan struct{}
	once   sync.Once
	ready  atomic.Bool

	hold *stream.PartitionHold
	// stopRenew stops the lease renewals (started by take) and waits for
	// them to end.
	stopRenew func()
	rcons     jetstream.Consumer
	pcons     jetstream.Consumer
	// work is the context of calls and bodies: cancelled when the
	// partition is lost, or when the drain times out.
	work       context.Context
	cancelWork context.CancelFunc

	mu       sync.Mutex
	sessions map[string]*session
	held     int            // items queued, not started
	running  sync.WaitGroup // session goroutines
	failed   error          // set when a consumer went away
	stopping bool           // no more items start; nothing more is queued
}

func newPartition(w *Worker, p int) *partition {
	return &partition{w: w, p: p, drainc: make(chan struct{}), sessions: make(map[string]*session),
		log: w.log.With().Int("partition", p).Logger()}
}

func (p *partition) drain() { p.once.Do(func() { close(p.drainc) }) }

func (p *partition) isDraining() bool {
	select {
	case <-p.drainc:
		return true
	default:
		return false
	}
}

// take acquires the partition's lease and replaces whatever consumers a
// previous owner left with this owner's: the request consumer from the
// start of the work queue (everything not acknowledged is delivered again
// at once, in order), the plan consumer from the previous one's ack floor.
func (p *partition) take(ctx context.Context) error {
	w := p.w
	// Bounded: a request sent while a stream elects a leader is never
	// answered, and the balance round waits for its takes.
	ctx, cancel := context.WithTimeout(ctx, takeTimeout)
	defer cancel()
	p.work, p.cancelWork = context.WithCancel(w.hardStop)
	hold, err := w.leases.Leases().AcquirePartition(ctx, p.p, w.cfg.Owner, p.lost)
	if err != nil {
		p.cancelWork()
		return err
	}
	p.hold = hold
	// The lease is renewed from here on, not only once the partition
	// runs: creating an R3 consumer after a node loss takes seconds (a
	// raft group is made and elects its leader), longer than a short TTL,
	// and a hold that lapsed during its take was lost at once ("partition
	// taken", then "not renewed within its TTL", and the consumers made
	// again by the next take).
	renewCtx, stopRenew := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { defer close(renewed); p.renew(renewCtx) }()
	p.stopRenew = func() { stopRenew(); <-renewed }
	if err := p.openConsumers(ctx); err != nil {
		// Nothing of a failed take is left: the request consumer it may
		// have made is deleted while the lease is still held (the plan
		// consumer is kept for its ack floor either way).
		p.cancelWork()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		if hold.Err() == nil {
			if derr := p.w.topo.Requests.DeleteConsumer(rctx, p.w.topo.Names().RequestConsumerName(p.p)); derr != nil && !errors.Is(derr, jetstream.ErrConsumerNotFound) {
				p.log.Warn().Err(derr).Msg("could not delete the request consumer of a failed take")
			}
		}
		p.stopRenew()
		_ = hold.Release(rctx)
		return err
	}
	if err := hold.Err(); err != nil {
		p.stopRenew()
		return err // lost during the take: p.lost said so
	}
	p.ready.Store(true)
	p.log.Info().Uint64("epoch", hold.Epoch()).Msg("partition taken")
	return nil
}

// consumerAttempt bounds one consumer request of a take. A request sent
// while the meta leader or a stream leader is elected is dropped, never
// answered: it is sent again after consumerAttempt, not waited for until
// the take's end (a delete sent at the end of an election waited 12 s).
// A creation that waits for its raft group's election is asked again with
// the same configuration, which the server answers with the consumer once
// it has a leader (nothing is deleted in between).
const consumerAttempt = 3 * time.Second

// again runs op with a context of at most consumerAttempt, again after a
// transient failure (stream.Transient: a timed-out or unanswered request,
// a 503, no responders), with backoff from 50 ms to 500 ms, until it
// succeeds, fails otherwise or ctx ends; it returns op's last error. Each
// op is safe to send again: a delete (not found once done) or a create
// with the same configuration (the same consumer).
func again(ctx context.Context, op func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, consumerAttempt)
		err := op(actx)
		cancel()
		if err == nil || !stream.Transient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// takeTimeout bounds one take (the lease, then the two consumers). An R3
// consumer created while a node is down may wait for its raft group's
// first election (4-9 s) before the server answers: with the nats
// client's 5 s default such creations failed and the next take deleted
// and made them again. The lease is renewed meanwhile.
const takeTimeout = 12 * time.Second

// inactive is the InactiveThreshold of a partition's consumers: the server
// deletes a consumer nobody pulled from for that long, so a SIGKILLed
// owner leaves nothing that outlasts its lease by much (a new owner
// replaces them at once anyway). Three TTLs and 5 s, so that a loaded
// owner that pulls late does not lose its consumer.
func (p *partition) inactive() time.Duration { return 3*p.w.ttl + 5*time.Second }

func (p *partition) openConsumers(ctx context.Context) error {
	w := p.w
	rname := w.topo.Names().RequestConsumerName(p.p)
	if err := again(ctx, func(ctx context.Context) error { return w.topo.Requests.DeleteConsumer(ctx, rname) }); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete old request consumer %s: %w", rname, err)
	}
	rcfg := jetstream.ConsumerConfig{
		Durable:           rname,
		Description:       "jingwei tool worker " + w.cfg.Owner,
		FilterSubject:     w.topo.Names().RequestsPartitionSubject(p.p),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           w.cfg.AckWait,
		MaxAckPending:     w.cfg.MaxHeld,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: p.inactive(),
		// The consumer's state (what it delivered, what was acked) is
		// kept in memory: with a file consumer every delivery and every
		// ack was a durable state write (two fsyncs per request with
		// sync=always) that nothing relies on. An ack still removes the
		// request from the work queue durably; a consumer lost with a
		// server restart is made again by the next take, which delivers
		// every request still queued again, in order, and a request
		// already in the log is not run again (its request id).
		MemoryStorage: true,
	}
	var rcons jetstream.Consumer
	err := again(ctx, func(ctx context.Context) (err error) {
		rcons, err = w.topo.Requests.CreateConsumer(ctx, rcfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("create request consumer %s: %w", rname, err)
	}
	pname := w.topo.Names().PlanConsumerName(p.p)
	pcfg := jetstream.ConsumerConfig{
		Durable:           pname,
		Description:       "jingwei tool worker " + w.cfg.Owner + ": retry plans",
		FilterSubject:     w.topo.Names().PlansPartitionSubject(p.p),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           w.cfg.AckWait,
		MaxAckPending:     w.cfg.MaxHeld,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: p.inactive(),
	}
	var old jetstream.Consumer
	err = again(ctx, func(ctx context.Context) (err error) {
		old, err = w.topo.PlanLog.Consumer(ctx, pname)
		return err
	})
	switch {
	case err == nil:
		if floor := old.CachedInfo().AckFloor.Stream; floor > 0 {
			pcfg.DeliverPolicy, pcfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
		}
		if err := again(ctx, func(ctx context.Context) error { return w.topo.PlanLog.DeleteConsumer(ctx, pname) }); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("delete old plan consumer %s: %w", pname, err)
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("read plan consumer %s: %w", pname, err)
	}
	var pcons jetstream.Consumer
	err = again(ctx, func(ctx context.Context) (err error) {
		pcons, err = w.topo.PlanLog.CreateConsumer(ctx, pcfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("create plan consumer %s: %w", pname, err)
	}
	p.rcons, p.pcons = rcons, pcons
	return nil
}

// lost is called once when the partition's hold ends (not when released).
func (p *partition) lost(err error) {
	p.cancelWork()
	if !errors.Is(err, errGivenBack) {
		p.w.lost.Add(1)
		p.log.Warn().Err(err).Msg("partition lost; not touching its sessions any more")
	}
}

// run (the lease renewed since take) fetches requests and plans and hands them to their
// sessions until the partition is drained, lost or a consumer goes away;
// then it gives the partition back.
func (p *partition) run() {
	fetchCtx, stopFetch := context.WithCancel(p.work)
	var fetchers sync.WaitGroup
	fetchers.Add(3)
	go func() { defer fetchers.Done(); p.fetch(fetchCtx, p.rcons, false) }()
	go func() { defer fetchers.Done(); p.fetch(fetchCtx, p.pcons, true) }()
	// Calls a previous owner left waiting for approval keep their
	// deadlines even if nothing else comes for their sessions.
	go func() { defer fetchers.Done(); p.resumeWaiting(fetchCtx) }()

	tick := time.NewTicker(p.tickEvery())
	defer tick.Stop()
	reason := "drained"
loop:
	for {
		select {
		case <-p.drainc:
			break loop
		case <-p.work.Done():
			reason = "lost"
			break loop
		case <-fetchCtx.Done():
			reason = "consumer gone"
			break loop
		case <-tick.C:
			p.keepHeld()
		}
	}
	// Running items finish; queued ones, and whatever is still fetched,
	// are left unacknowledged for the next owner (its consumer delivers
	// them again, in order).
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	stopFetch()
	fetchers.Wait()
	p.w.forget(p)
	p.waitSessions()
	// The lease is renewed until it is released: writing the sessions'
	// budget counts may take longer than its TTL.
	p.giveBack(reason, p.stopRenew)
}

// waitSessions waits for the session goroutines, keeping their held
// messages in progress meanwhile.
func (p *partition) waitSessions() {
	done := make(chan struct{})
	go func() { p.running.Wait(); close(done) }()
	tick := time.NewTicker(p.tickEvery())
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			p.keepHeld()
		}
	}
}

// giveBack deletes the request consumer, writes the sessions' deferred
// budget counts and releases the lease, if the partition is still ours.
// The plan consumer is left for the next owner, who starts from its ack
// floor (the server deletes it after InactiveThreshold if nobody does).
func (p *partition) giveBack(reason string, stopRenew func()) {
	defer p.cancelWork()
	defer stopRenew()
	if p.hold.Err() != nil {
		p.log.Info().Str("reason", reason).Msg("partition dropped (lost)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	// Only a live lease entitles the worker to touch the consumers: a new
	// owner has ones of the same names.
	if err := p.hold.Renew(ctx); err != nil {
		p.log.Info().Err(err).Str("reason", reason).Msg("partition dropped (lease gone)")
		return
	}
	if err := p.w.topo.Requests.DeleteConsumer(ctx, p.w.topo.Names().RequestConsumerName(p.p)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.log.Warn().Err(err).Msg("could not delete request consumer")
	}
	p.mu.Lock()
	sessions := make([]*session, 0, len(p.sessions))
	for _, s := range p.sessions {
		sessions = append(sessions, s)
	}
	p.mu.Unlock()
	fctx, fcancel := context.WithTimeout(context.Background(), max(p.w.cfg.DrainTimeout, ackTimeout))
	for _, s := range sessions {
		if p.hold.Err() != nil {
			break
		}
		s.flush(fctx)
	}
	fcancel()
	stopRenew()
	rctx, rcancel := context.WithTimeout(context.Background(), ackTimeout)
	defer rcancel()
	if err := p.hold.Release(rctx); err != nil {
		p.log.Warn().Err(err).Msg("could not release partition lease")
	}
	p.w.givenBack.Add(1)
	p.log.Info().Str("reason", reason).Int("sessions", len(sessions)).Msg("partition given back")
}

// renew renews the lease every RenewInterval until ctx ends: one lease
// write per partition per interval, whatever its number of sessions.
func (p *partition) renew(ctx context.Context) {
	t := time.NewTicker(p.w.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A slow renewal may still land in time: it is given the TTL (the
		// hold trusts the lease one TTL from the renewal's start only).
		rctx, cancel := context.WithTimeout(ctx, p.w.ttl)
		err := p.hold.Renew(rctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil || p.hold.Err() != nil:
			return
		default:
			p.log.Warn().Err(err).Msg("partition lease renewal failed")
		}
	}
}

// fetch pulls a consumer's messages and hands each to its session, until
// ctx ends. A consumer that went away (deleted by a new owner, or by the
// server) ends the partition.
func (p *partition) fetch(ctx context.Context, cons jetstream.Consumer, plans bool) {
	own := cons.CachedInfo()
	for ctx.Err() == nil {
		// The server ends the pull after pullWait (its request timeout
		// status, after every message it delivered on the pull), and the
		// client a second later at the latest: a pull the server never
		// answers (its consumer deleted meanwhile) cannot stall the
		// partition. Not FetchContext with a deadline: that gives the
		// server only a tenth of the wait less than the client, and a
		// message delivered just before the server's expiry but read after
		// the client's (a loaded machine) was dropped unacknowledged — its
		// request then waited out the consumer's AckWait (30 s) and the
		// gateway's call timed out.
		batch, err := cons.Fetch(pullBatch, jetstream.FetchMaxWait(pullWait))
		if err == nil {
			for m := range batch.Messages() {
				if ctx.Err() != nil {
					// Left unacknowledged: the next owner's consumer
					// delivers it again.
					continue
				}
				if _, ok := stream.DeliveredBy(m, own); !ok {
					// Another consumer's delivery on this pull's inbox: a
					// client with another role could hand the partition a
					// "request" that is in no work queue.
					p.log.Warn().Str("subject", m.Subject()).Str("reply", m.Reply()).Bool("plans", plans).Msg("a message another consumer delivered on the partition's inbox dropped")
					continue
				}
				p.dispatch(ctx, m, plans)
			}
			err = batch.Error()
		}
		if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			p.mu.Lock()
			p.failed = err
			p.mu.Unlock()
			p.log.Warn().Err(err).Bool("plans", plans).Msg("partition consumer gone; giving the partition up")
			p.drain()
			return
		}
		p.log.Debug().Err(err).Bool("plans", plans).Msg("fetch failed")
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dispatch queues a message behind its session's work and starts the
// session's goroutine if it is not running.
func (p *partition) dispatch(ctx context.Context, m jetstream.Msg, plan bool) {
	id := stream.SessionOf(m.Subject())
	if id == "" || p.w.topo.Names().PartitionOf(id) != p.p {
		p.log.Warn().Str("subject", m.Subject()).Msg("message outside the partition terminated")
		_ = m.TermWithReason("not a session subject of this partition")
		return
	}
	p.enqueue(id, item{msg: m, plan: plan}) // false: left for the next owner
}

// post queues fn behind the session's work, to run in its goroutine (m,
// if not nil, is the message it answers: kept in progress while held). It
// returns false when the partition stops: the caller leaves m for the
// next owner.
func (p *partition) post(id string, m jetstream.Msg, fn func(*session)) bool {
	if !p.ready.Load() || p.work.Err() != nil {
		return false
	}
	return p.enqueue(id, item{msg: m, fn: fn})
}

// enqueue queues it behind its session's work and starts the session's
// goroutine if it is not running; false (nothing queued) when the
// partition stops.
func (p *partition) enqueue(id string, it item) bool {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return false
	}
	s := p.sessions[id]
	if s == nil {
		s = newSession(p, id)
		p.sessions[id] = s
	}
	s.queue = append(s.queue, it)
	s.last = time.Now()
	p.held++
	start := !s.active
	if start {
		s.active = true
		p.running.Add(1)
	}
	p.mu.Unlock()
	if start {
		go func() {
			defer p.running.Done()
			s.run()
		}()
	}
	return true
}

// next pops the session's next item; ok false (and the session marked
// inactive) when there is none or the partition stops.
func (p *partition) next(s *session) (item, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Run's context ended: nothing more starts, even before Run's
	// goroutine has marked the partition stopping.
	if len(s.queue) == 0 || p.stopping || p.w.stopping() {
		s.active = false
		return item{}, false
	}
	it := s.queue[0]
	s.queue[0] = item{}
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	p.held--
	return it, true
}

// requeue puts an item back at the head of the session's queue (its
// attempt could not be recorded; it is tried again, still first).
func (p *partition) requeue(s *session, it item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.queue = append([]item{it}, s.queue...)
	p.held++
}

// tickEvery is how often held messages are kept in progress and idle
// sessions dropped.
func (p *partition) tickEvery() time.Duration {
	return max(min(p.w.cfg.AckWait/3, p.w.cfg.IdleTimeout/2), 50*time.Millisecond)
}

// keepHeld tells the server that every held message is still in progress
// (so none is redelivered behind the worker's back, which could let it
// overtake), and drops idle sessions from memory.
func (p *partition) keepHeld() {
	p.mu.Lock()
	var msgs []jetstream.Msg
	var idle []*session
	now := time.Now()
	for id, s := range p.sessions {
		for _, it := range s.queue {
			if it.msg != nil {
				msgs = append(msgs, it.msg)
			}
		}
		// A session whose calls wait for approval stays: its timer must
		// fire (approval.go).
		if !s.active && len(s.queue) == 0 && !s.parked.Load() && now.Sub(s.last) > p.w.cfg.IdleTimeout {
			delete(p.sessions, id)
			idle = append(idle, s)
		}
	}
	p.mu.Unlock()
	for _, m := range msgs {
		_ = m.InProgress()
	}
	if len(idle) == 0 {
		return
	}
	// Idle sessions leave memory with their deferred budget counts
	// written; work that comes later confirms them again (reads only).
	ctx, cancel := context.WithTimeout(p.work, ackTimeout)
	defer cancel()
	for _, s := range idle {
		s.flush(ctx)
		p.w.budget.Forget(s.id)
	}
}

// sessionIDs returns the sessions held in memory.
func (p *partition) sessionIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.sessions))
	for id := range p.sessions {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// counts returns the sessions held in memory and the items held.
func (p *partition) counts() (sessions, held int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions), p.held
}
