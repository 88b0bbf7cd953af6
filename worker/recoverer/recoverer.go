package recoverer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Recoverer is the recovery worker. Build it with New and run it with Run;
// its methods (Inspect, Prepare, Status) may be called concurrently, also
// while Run runs.
type Recoverer struct {
	cfg   Config
	t     *stream.Topology
	log   zerolog.Logger
	plans *stream.Plans
	async jetstream.JetStream // own context, so flushes wait for our publishes only

	track  *tracker
	review *awaiting
	auto   chan finding

	ready     chan struct{} // closed once Run has started up
	readyOnce sync.Once

	// afterCreate, when set (tests only), runs after a plan's KV create and
	// before its publication; an error stops prepare there, as a crash
	// would.
	afterCreate func(schema.Plan) error
}

// New returns a recoverer for cfg (after WithDefaults). It fails with
// ErrInvalidConfig naming a missing or invalid field.
func New(cfg Config) (*Recoverer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	async, err := jetstream.New(cfg.Topology.JS.Conn())
	if err != nil {
		return nil, fmt.Errorf("recoverer: jetstream: %w", err)
	}
	return &Recoverer{
		cfg:    cfg,
		t:      cfg.Topology,
		log:    cfg.Logger.With().Str("recoverer", cfg.Name).Logger(),
		plans:  stream.NewPlans(cfg.Topology.Plans),
		async:  async,
		track:  newTracker(),
		review: newAwaiting(maxAwaiting),
		auto:   make(chan finding, 1024),
		ready:  make(chan struct{}),
	}, nil
}

// Ready returns a channel that is closed once Run has started up: plans a
// crash left unpublished are published, lease expiry is watched, the
// sessions whose lease expired while no recoverer ran are reconciled, and
// the service answers. It is never closed if Run fails to start.
func (r *Recoverer) Ready() <-chan struct{} { return r.ready }

// Stats are the recoverer's counters.
type Stats struct {
	// EventsSeen is how many session events the classifier has read since
	// the process started.
	EventsSeen uint64 `json:"events_seen"`
	// OpenCalls is how many calls the classifier tracks as open: its memory
	// is proportional to this, not to EventsSeen.
	OpenCalls int `json:"open_calls"`
}

// Stats returns the classifier's counters.
func (r *Recoverer) Stats() Stats {
	seen, open := r.track.counts()
	return Stats{EventsSeen: seen, OpenCalls: open}
}

// Run runs the recoverer until ctx is done and then returns nil, or returns
// an error if it cannot start (the topology unreachable, the service not
// registered). In order it: publishes issued plans a crash left
// unpublished, starts watching lease expiry, reconciles sessions whose
// lease expired while it was down, then consumes events and reviews, serves
// the `jingwei` micro service and handles expiries.
func (r *Recoverer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := r.run(ctx)
	if ctx.Err() != nil {
		return nil // stopped during start
	}
	return err
}

func (r *Recoverer) run(ctx context.Context) error {
	if err := r.RepairPlans(ctx); err != nil {
		return err
	}
	// Watch first, so that no expiry falls between reconcile and watch.
	expired, err := r.t.WatchLeaseExpiry(ctx)
	if err != nil {
		return err
	}
	if err := r.Reconcile(ctx); err != nil {
		return err
	}
	var svc micro.Service
	if !r.cfg.DisableService {
		if svc, err = r.serve(ctx); err != nil {
			return err
		}
		defer func() { _ = svc.Stop() }()
	}
	r.readyOnce.Do(func() { close(r.ready) })
	var wg sync.WaitGroup
	goLoop := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, name, f)
		}()
	}
	goLoop("events", r.consumeEvents)
	goLoop("reviews", r.consumeReviews)
	goLoop("auto-plan", r.autoPlan)
	goLoop("leases", func(ctx context.Context) error {
		if expired == nil {
			// The watcher stopped (a lost connection): watch again, and
			// reconcile what expired in between.
			var err error
			if expired, err = r.t.WatchLeaseExpiry(ctx); err != nil {
				return err
			}
			if err := r.Reconcile(ctx); err != nil {
				expired = nil
				return err
			}
		}
		r.handleExpiries(ctx, expired)
		expired = nil
		return errors.New("lease watcher stopped")
	})
	<-ctx.Done()
	wg.Wait()
	return nil
}

// handleExpiries takes over the sessions the watcher reports, until the
// channel closes.
func (r *Recoverer) handleExpiries(ctx context.Context, expired <-chan string) {
	for s := range expired {
		r.log.Info().Str("session", s).Msg("lease expired")
		if err := r.takeOverIfOpen(ctx, s, true); err != nil && ctx.Err() == nil {
			r.log.Error().Err(err).Str("session", s).Msg("takeover after lease expiry failed")
		}
	}
}

// loop runs f until ctx is done, restarting it with backoff after an error
// (a deleted consumer, a lost connection).
func (r *Recoverer) loop(ctx context.Context, name string, f func(context.Context) error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	for ctx.Err() == nil {
		start := time.Now()
		err := f(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			b.Reset()
		}
		r.log.Warn().Err(err).Str("loop", name).Msg("restarting")
		select {
		case <-ctx.Done():
		case <-time.After(b.NextBackOff()):
		}
	}
}

// consumerName returns a durable consumer name of this recoverer.
func (r *Recoverer) consumerName(kind string) string {
	return r.t.Prefix + "-recoverer-" + r.cfg.Name + "-" + kind
}

// HeaderAssessmentID carries an assessment's identity,
// "a.<session>.<call_id>.<evidence>": the same for the same assessment from
// any recoverer, so consumers can drop repeats (a redelivery after a
// crash, several recoverers). Only assessments published after a load
// (takeover, retries) also use it as Nats-Msg-Id; the classifier's do not,
// because server-side dedup costs a third of its throughput.
const HeaderAssessmentID = "Jw-Assessment-Id"

// ackBatch is how many events are classified before their assessments are
// flushed and the events acknowledged (also whenever the consumer has
// nothing pending).
const ackBatch = 256

// pullBatch is how many events one pull asks for.
const pullBatch = 2 * ackBatch

// maxAckPending is how many events the classifier may hold
// unacknowledged: two batches in the pipeline plus a pull's worth.
const maxAckPending = 4 * ackBatch

// eventsConsumerConfig is the classifier's durable consumer: every event of
// the stream (JW_EVENTS holds nothing else, so no filter: a filter makes
// the server match every stored subject against it, about a sixth of the
// server's CPU when a consumer drains the stream), acknowledged
// cumulatively (AckAll) once per batch.
func eventsConsumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckAllPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: maxAckPending,
	}
}

type pending struct {
	msg *nats.Msg
	id  string
	f   jetstream.PubAckFuture
}

// consumeEvents classifies jw.events.> with the durable consumer until ctx
// ends or the consumer fails.
func (r *Recoverer) consumeEvents(ctx context.Context) error {
	cfg := eventsConsumerConfig(r.consumerName("events"))
	cfg.Description = "jingwei recovery worker " + r.cfg.Name + ": classifies every call"
	cons, err := r.t.JS.CreateOrUpdateConsumer(ctx, r.t.StreamName("EVENTS"), cfg)
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	defer it.Stop()
	// Batches are pipelined: when a batch is full its publishes are left in
	// flight and the previous batch (whose acks have normally arrived) is
	// settled and its last event acknowledged (AckAll covers the earlier
	// ones). When nothing is pending everything is settled.
	type batch struct {
		last jetstream.Msg
		pubs []pending
	}
	var (
		cur, prev batch
		n         int
		found     []finding
	)
	settle := func(ctx context.Context, b *batch) error {
		if err := r.awaitPublished(ctx, b.pubs); err != nil {
			return err
		}
		if b.last != nil {
			if err := b.last.Ack(); err != nil {
				return fmt.Errorf("ack events: %w", err)
			}
		}
		*b = batch{pubs: b.pubs[:0]}
		return nil
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				// Settle what is in flight; anything left unacknowledged
				// is redelivered to the next run.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				if settle(sctx, &prev) == nil {
					_ = settle(sctx, &cur)
				}
				return nil
			}
			return fmt.Errorf("events consumer: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("events consumer: %w", err)
		}
		session := stream.SessionOf(m.Subject())
		found, err = r.track.observe(session, md.Sequence.Stream, m.Data(), found[:0])
		if err != nil {
			r.log.Warn().Err(err).Str("session", session).Uint64("seq", md.Sequence.Stream).Msg("event does not decode; skipped")
		}
		for _, f := range found {
			a := f.a
			if a == nil {
				if a = r.inspectLoaded(ctx, f.session, f.callID); a == nil {
					continue
				}
			}
			p, err := r.publishAsync(*a)
			if err != nil {
				return err
			}
			cur.pubs = append(cur.pubs, p)
		}
		cur.last = m
		n++
		switch {
		case md.NumPending == 0:
			if err := settle(ctx, &prev); err != nil {
				return err
			}
			if err := settle(ctx, &cur); err != nil {
				return err
			}
			n = 0
		case n >= ackBatch:
			if err := settle(ctx, &prev); err != nil {
				return err
			}
			prev, cur = cur, batch{pubs: prev.pubs[:0]}
			n = 0
		}
	}
}

// inspectLoaded loads the session and inspects callID; nil if the call
// cannot be assessed (superseded by a later attempt, legacy, corrupt
// history), which is logged.
func (r *Recoverer) inspectLoaded(ctx context.Context, session, callID string) *schema.Assessment {
	h, err := r.t.Load(ctx, session)
	if err == nil {
		var a schema.Assessment
		if a, err = recovery.Inspect(schema.Events(h), callID); err == nil {
			return &a
		}
	}
	lvl := r.log.Warn()
	if errors.Is(err, schema.ErrSupersededCall) || errors.Is(err, schema.ErrLegacyCall) {
		lvl = r.log.Debug()
	}
	lvl.Err(err).Str("session", session).Str("call_id", callID).Msg("call not assessed")
	return nil
}

// assessmentMsg builds the message of an assessment; its Msg-Id makes the
// same assessment from several recoverers, or after a redelivery, one
// message.
func (r *Recoverer) assessmentMsg(a schema.Assessment) (msg *nats.Msg, id string) {
	msg = nats.NewMsg(r.t.AssessmentsSubject(a.Session))
	// The contract comes from a decoded event, so its effect is valid:
	// the only error AppendAssessment has cannot happen.
	msg.Data, _ = schema.AppendAssessment(make([]byte, 0, 256), &a)
	return msg, "a." + a.Session + "." + a.CallID + "." + a.Evidence
}

// noted records a published assessment: awaiting review or not, and the
// auto-plan queue.
func (r *Recoverer) noted(a schema.Assessment) {
	r.review.note(a)
	if r.cfg.AutoPlan && a.Decision == schema.DecisionRetryAllowed {
		select {
		case r.auto <- finding{session: a.Session, callID: a.CallID}:
		default:
			r.log.Warn().Str("session", a.Session).Str("call_id", a.CallID).Msg("auto-plan queue full; plan not issued (prepare it explicitly)")
		}
	}
	r.log.Debug().Str("session", a.Session).Str("call_id", a.CallID).Str("outcome", string(a.Outcome)).Str("decision", string(a.Decision)).Msg("assessed")
}

func (r *Recoverer) publishAsync(a schema.Assessment) (pending, error) {
	msg, id := r.assessmentMsg(a)
	msg.Header.Set(HeaderAssessmentID, id)
	f, err := r.async.PublishMsgAsync(msg)
	if err != nil {
		return pending{}, fmt.Errorf("publish assessment: %w", err)
	}
	r.noted(a)
	return pending{msg: msg, id: id, f: f}, nil
}

// awaitPublished waits for the acks of async publishes and re-sends
// (synchronously, same Msg-Id) those that failed.
func (r *Recoverer) awaitPublished(ctx context.Context, ps []pending) error {
	for _, p := range ps {
		select {
		case <-p.f.Ok():
			continue
		case err := <-p.f.Err():
			r.log.Warn().Err(err).Str("subject", p.msg.Subject).Msg("assessment publish failed; re-sending")
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := r.publishSync(ctx, p.msg, p.id); err != nil {
			return err
		}
	}
	return nil
}

// publishSync publishes msg with Msg-Id id, retrying transport errors with
// backoff until ctx ends.
func (r *Recoverer) publishSync(ctx context.Context, msg *nats.Msg, id string) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 20*time.Millisecond, 2*time.Second, 30*time.Second
	return backoff.Retry(func() error {
		m := nats.NewMsg(msg.Subject)
		m.Data = msg.Data
		for k, v := range msg.Header {
			if k != jetstream.MsgIDHeader {
				m.Header[k] = v
			}
		}
		_, err := r.t.JS.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code != 503 {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

// publishAssessment publishes one assessment synchronously.
func (r *Recoverer) publishAssessment(ctx context.Context, a schema.Assessment) error {
	msg, id := r.assessmentMsg(a)
	msg.Header.Set(HeaderAssessmentID, id)
	if err := r.publishSync(ctx, msg, id); err != nil {
		return fmt.Errorf("publish assessment of %s/%s: %w", a.Session, a.CallID, err)
	}
	r.noted(a)
	return nil
}

// autoPlan issues plans for queued retry_allowed assessments (AutoPlan).
func (r *Recoverer) autoPlan(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-r.auto:
			p, err := r.Prepare(ctx, f.session, f.callID)
			if err != nil {
				r.log.Info().Err(err).Str("session", f.session).Str("call_id", f.callID).Msg("auto-plan: no plan")
				continue
			}
			r.log.Info().Str("session", f.session).Str("call_id", f.callID).Str("plan_id", p.PlanID).Msg("auto-plan: plan issued")
		}
	}
}
