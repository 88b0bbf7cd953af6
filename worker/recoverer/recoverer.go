package recoverer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/worker/service"
)

// Recoverer is the recovery worker: one type that composes the small
// services it is made of (see the package documentation) and runs them.
// Build it with New and run it with Run; its methods may be called
// concurrently, also while Run runs.
type Recoverer struct {
	*base
	pub      *publisher     // assessments on jw.assessments.<session>
	classify *classifier    // the event consumer and its open calls
	leases   *takeovers     // lease expiry, takeovers, reconcile
	reviews  *reviewChecker // the review consumer and the review checks
	issuer   *issuer        // prepare, issue, repair, redelivery
	awaiting *awaiting      // calls awaiting review, for status
	identity *identityGuard // the protected streams against their recorded identity
	count    *counting      // the lease that says whether this one counts shared work

	ready     chan struct{} // closed once Run has started up
	readyOnce sync.Once
}

// base is what every part of the recoverer shares: its configuration, the
// topology and its log.
type base struct {
	cfg Config
	t   *stream.Topology
	log zerolog.Logger
	// identity compares the protected streams with their recorded
	// identity: prepare and takeovers ask it first.
	identity *identityGuard
}

// consumerName returns a durable consumer name of this recoverer.
func (b *base) consumerName(kind string) string {
	return b.t.Prefix + "-recoverer-" + b.cfg.Name + "-" + kind
}

// New returns a recoverer for cfg (after WithDefaults). It fails with
// ErrInvalidConfig naming a missing or invalid field.
func New(cfg Config) (*Recoverer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &base{cfg: cfg, t: cfg.Topology, log: cfg.Logger.With().Str("recoverer", cfg.Name).Logger()}
	r := &Recoverer{base: b, awaiting: newAwaiting(maxAwaiting), ready: make(chan struct{})}
	var err error
	if r.pub, err = newPublisher(b, r.noted); err != nil {
		return nil, err
	}
	r.classify = &classifier{base: b, pub: r.pub, track: newTracker()}
	if o := b.outcomes(); o != nil {
		r.classify.track.approvals.timedOut = o.ApprovalTimedOut
	}
	r.leases = &takeovers{base: b, pub: r.pub, track: r.classify.track}
	r.reviews = &reviewChecker{base: b, settled: r.awaiting.forget}
	r.issuer = newIssuer(b, r.pub, r.reviews, r.leases, r.awaiting.forget)
	r.identity = &identityGuard{base: b, wake: make(chan struct{}, 1)}
	r.count = &counting{base: b}
	b.identity = r.identity
	return r, nil
}

// noted records a published assessment: awaiting review or not, and the
// auto-plan queue.
func (r *Recoverer) noted(a schema.Assessment) {
	r.awaiting.note(a)
	if o := r.cfg.Observer; o != nil {
		o.Assessed(a)
	}
	if r.cfg.AutoPlan && a.Decision == schema.DecisionRetryAllowed {
		r.issuer.queue(a.Session, a.CallID)
	}
	r.log.Debug().Str("session", a.Session).Str("call_id", a.CallID).Str("outcome", string(a.Outcome)).Str("decision", string(a.Decision)).Msg("assessed")
}

// Ready returns a channel that is closed once Run has started up: plans a
// crash left unpublished are published, lease expiry is watched, the
// sessions whose lease expired while no recoverer ran are reconciled, and
// the service answers. It is never closed if Run fails to start.
func (r *Recoverer) Ready() <-chan struct{} { return r.ready }

// Stats returns the classifier's counters, as jw.api.status shows them.
func (r *Recoverer) Stats() service.Stats {
	seen, open := r.classify.track.counts()
	return service.Stats{EventsSeen: seen, OpenCalls: open}
}

// Run runs the recoverer until ctx is done and then returns nil, or returns
// an error if it cannot start (the topology unreachable, the service not
// registered). In order it: publishes issued plans a crash left
// unpublished (the issuer), starts watching lease expiry and reconciles
// sessions whose lease expired while it was down (the takeovers), serves
// the `jingwei` micro service, then runs the classifier, the review
// checker, the auto-planner and the takeovers of expired leases, each
// restarted with backoff when it fails.
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
	// A replaced stream is logged here and refused by prepare and the
	// takeovers; status still answers. The advisories are watched before
	// the first comparison, so no replacement falls between the two.
	if err := r.identity.watch(ctx); err != nil {
		return err
	}
	if _, err := r.identity.check(ctx); err != nil {
		return err
	}
	if err := r.rebuildAwaiting(ctx); err != nil {
		return err
	}
	if err := r.issuer.RepairPlans(ctx); err != nil {
		return err
	}
	if err := r.leases.start(ctx); err != nil {
		return err
	}
	if _, err := r.classify.start(ctx); err != nil {
		return err
	}
	if !r.cfg.DisableService {
		svc, err := r.serve(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = svc.Stop() }()
	}
	r.readyOnce.Do(func() { close(r.ready) })
	var wg sync.WaitGroup
	parts := []struct {
		name string
		run  func(context.Context) error
	}{
		{"events", r.classify.run},
		{"reviews", r.reviews.run},
		{"auto-plan", r.issuer.autoPlan},
		{"leases", r.leases.run},
		{"identity", r.identity.run},
	}
	if counts(r.cfg.Observer) {
		parts = append(parts, struct {
			name string
			run  func(context.Context) error
		}{"counting", r.count.run})
	}
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, p.name, p.run)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	return nil
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

// serve registers the `jingwei` micro service: inspect, prepare, status
// and history (jw.api.call is the tool workers', see toolworker.Gateway).
func (r *Recoverer) serve(ctx context.Context) (micro.Service, error) {
	svc, err := service.Start(ctx, service.Config{
		Conn:        r.t.JS.Conn(),
		Name:        service.Name,
		Prefix:      r.t.Prefix,
		Description: "jingwei recovery worker: inspect calls, prepare retries, status, session history",
		Metadata:    map[string]string{"recoverer": r.cfg.Name},
		Role:        string(access.RoleRecoverer),
		Logger:      r.log,
	},
		service.Endpoint{Name: service.EndpointInspect, Handler: func(ctx context.Context, data []byte) (any, error) {
			var t service.Target
			if err := service.DecodeBody(data, &t, false); err != nil {
				return nil, err
			}
			return r.Inspect(ctx, t.Session, t.CallID)
		}},
		service.Endpoint{Name: service.EndpointPrepare, Handler: func(ctx context.Context, data []byte) (any, error) {
			var t service.Target
			if err := service.DecodeBody(data, &t, false); err != nil {
				return nil, err
			}
			return r.Prepare(ctx, t.Session, t.CallID)
		}},
		service.Endpoint{Name: service.EndpointStatus, Handler: func(ctx context.Context, data []byte) (any, error) {
			var s service.StatusRequest
			if err := service.DecodeBody(data, &s, true); err != nil {
				return nil, err
			}
			st, err := r.Status(ctx, s.Session)
			if err != nil || s.CallID == "" {
				return st, err
			}
			if err := checkTarget(s.Session, s.CallID); err != nil {
				return nil, err
			}
			st.Reviews, err = r.Reviews(ctx, s.Session, s.CallID)
			return st, err
		}},
		service.Endpoint{Name: service.EndpointHistory, Handler: func(ctx context.Context, data []byte) (any, error) {
			var q service.HistoryRequest
			if err := service.DecodeBody(data, &q, false); err != nil {
				return nil, err
			}
			page, err := r.History(ctx, q)
			if err != nil {
				return nil, err
			}
			return encodeHistoryPage(page)
		}},
	)
	if err != nil {
		return nil, fmt.Errorf("recoverer: %w", err)
	}
	return svc, nil
}

// Inspect loads the session's log and classifies callID (recovery.Inspect).
// The history is read as it is now: for a call still open under a live
// lease the assessment describes the moment, not a confirmed fact. Errors
// are *schema.Error with the codes of a history, bad_request for an
// invalid session or an empty call id.
func (r *Recoverer) Inspect(ctx context.Context, session, callID string) (schema.Assessment, error) {
	if err := checkTarget(session, callID); err != nil {
		return schema.Assessment{}, err
	}
	h, err := r.t.Logs().Load(ctx, session)
	if err != nil {
		return schema.Assessment{}, err
	}
	return inspect(h, callID)
}

// Prepare plans a retry of callID in session from its confirmed history
// and issues the plan exactly once (see the package documentation and the
// issuer): the latest review accepted for the call is applied (signatures
// required, against Config.TrustedReviewers), recovery.PrepareRetry
// decides, the plan is created in jw_plans and published on
// jw.plans.<session> with its plan id as Nats-Msg-Id. If the plan was
// issued before (by this or another recoverer) the stored plan is returned
// and its publication made sure of.
//
// Errors are *schema.Error: the codes of recovery.PrepareRetry (completed,
// needs_review, invalid_review, unknown_call, superseded_call, …),
// not_confirmed for a call still open under a live lease, bad_request. A
// plan already consumed whose attempt is not on the log (the consumer was
// stopped in between) is returned and delivered again, for the session's
// next owner to complete once (see worker.TakeOperation).
func (r *Recoverer) Prepare(ctx context.Context, session, callID string) (schema.Plan, error) {
	if err := checkTarget(session, callID); err != nil {
		return schema.Plan{}, err
	}
	p, err := r.issuer.prepare(ctx, session, callID)
	if o := r.outcomes(); o != nil && !errors.Is(err, context.Canceled) {
		o.PlanAnswered(codeOf(err))
	}
	return p, err
}

// codeOf is the jingwei code of err, "" for nil.
func codeOf(err error) schema.Code {
	if err == nil {
		return ""
	}
	return schema.CodeOf(err)
}

// TakeOver takes the session over and confirms its history: if nobody may
// still write it (stream.Logs.Writer: no live session lease, and the
// owner of its partition did not write its last event) it appends
// session.fenced at the epoch just above the log's (from then on the old
// writer's appends fail with stream.ErrFenced; a later owner of the
// partition writes above it), loads the log and inspects every call that
// was open before the fence. It returns those assessments; the classifier
// publishes them when it reads the fence (one publisher per call
// outcome). It fails with an error matching stream.ErrLeaseHeld if a
// writer is live.
func (r *Recoverer) TakeOver(ctx context.Context, session string) ([]schema.Assessment, error) {
	as, _, err := r.leases.takeOver(ctx, session)
	return as, err
}

// Reconcile takes over every session that has open calls and nobody who
// may still write it, in parallel (Config.Parallelism):
// what a recoverer that was down while leases expired missed. Run calls it
// once at start, after it started watching lease expiry.
func (r *Recoverer) Reconcile(ctx context.Context) error { return r.leases.reconcile(ctx) }

// RepairPlans publishes every plan that jw_plans holds as issued but
// JW_PLANS does not: what a crash between a plan's KV create and its
// publication left behind. Run calls it at start.
func (r *Recoverer) RepairPlans(ctx context.Context) error { return r.issuer.RepairPlans(ctx) }

// Reviews returns every review published for callID in session, in stream
// order, each with this recoverer's judgement of it (see
// service.ReviewCheck). A message that does not even decode to a review of
// callID is not listed.
func (r *Recoverer) Reviews(ctx context.Context, session, callID string) ([]service.ReviewCheck, error) {
	if err := checkTarget(session, callID); err != nil {
		return nil, err
	}
	return r.reviews.list(ctx, session, callID)
}

// checkTarget checks the session and call id of a request.
func checkTarget(session, callID string) error {
	if !schema.ValidSession(session) {
		return schema.Errorf(schema.CodeBadRequest, "session %q: want 1-128 bytes of [A-Za-z0-9_-]", session)
	}
	if callID == "" {
		return schema.Errorf(schema.CodeBadRequest, "call_id is required")
	}
	return nil
}
