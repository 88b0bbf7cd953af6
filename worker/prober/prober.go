// Package prober settles uncertain calls the way a reviewer would, by
// reading back, and says so. When the recovery worker assesses a call
// uncertain and decides it needs a review, and the call's tool names a
// probe (effect.Metadata.Probe: a read-only tool of the same backend), the
// prober runs the probe after the session is fenced, with bounded retries,
// and publishes a signed automated review (schema.Review with Probe set)
// on jw.reviews.<session>:
//
//   - completed when the probe found the effect (always safe: a retry is
//     refused, nothing is done twice);
//   - not_executed only when the probe answered not_found and declares
//     that answer authoritative (effect.Metadata.AuthoritativeNotFound: it
//     raised the store's fence to the session's epoch before it looked, or
//     the backend deduplicates on the operation key);
//   - otherwise uncertain: evidence attached to the call for the person
//     who reviews it, never a verdict (recovery.FoldReviews).
//
// A probe that fails or hangs on every attempt publishes nothing: the call
// stays exactly as it was. The prober never touches a call whose tool
// names no probe, never runs a probe that is not read-only, and signs with
// a key of its own that the recovery worker trusts as a prober's
// (recoverer.Config.TrustedProbers), not as a person's.
package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// Answer is what a probe found.
type Answer string

// The answers a probe gives.
const (
	// Found: the call's effect is in the store (evidence says where).
	Found Answer = "found"
	// NotFound: the store has no effect of the call.
	NotFound Answer = "not_found"
	// Unknown: the probe could not tell.
	Unknown Answer = "unknown"
)

// Result is a probe's output (the JSON its body returns).
type Result struct {
	Answer   Answer `json:"answer"`
	Evidence string `json:"evidence"`
}

// Kind is what became of one probed call (Outcome.Kind).
type Kind string

// The kinds of outcome.
const (
	// Settled: a completed or not_executed automated review was published.
	Settled Kind = "settled"
	// Undecided: the probe answered but could not decide (unknown, or a
	// not_found that is not authoritative): evidence only.
	Undecided Kind = "undecided"
	// Failed: every attempt failed or timed out; nothing was published.
	Failed Kind = "failed"
)

// Outcome is what the prober did about one call, for metrics and reports.
type Outcome struct {
	Session, CallID, Tool, Probe string
	Kind                         Kind
	// Verdict of the published review; empty when Kind is Failed.
	Verdict schema.Verdict
	// Took is how long from the assessment's arrival to the verdict.
	Took time.Duration
}

// Config configures a Prober.
type Config struct {
	// Topology is where sessions, assessments and reviews are, on a
	// connection of the prober role (stream/access.RoleProber), which may
	// read the session logs and publish reviews. Required.
	Topology *stream.Topology
	// Key is the prober's own nkey user key pair: it signs the automated
	// reviews. Required; its public key must be in the recovery worker's
	// trusted probers.
	Key nkeys.KeyPair
	// Tools are the backend's tools: a call's tool is looked up here for
	// the probe its metadata names, and so is the probe. Required.
	Tools *worker.Registry
	// Name names the prober's durable consumer (<prefix>-prober-<Name>).
	// Defaults to "main".
	Name string
	// Operator is the review's operator field. Defaults to "prober".
	Operator string
	// Attempts bounds the runs of a probe for one call. Defaults to 3.
	Attempts int
	// Timeout bounds one run. Defaults to 5 s.
	Timeout time.Duration
	// Backoff is the pause between runs. Defaults to 200 ms.
	Backoff time.Duration
	// Logger receives the prober's log.
	Logger zerolog.Logger
	// Observe, when set, is told of every probed call.
	Observe func(Outcome)
	// Now defaults to time.Now.
	Now func() time.Time
}

// ErrInvalidConfig is a Config with a required field missing.
var ErrInvalidConfig = errors.New("prober: invalid config")

// Prober runs probes for uncertain calls. Safe for concurrent use.
type Prober struct {
	cfg   Config
	pub   string
	queue chan schema.Assessment
}

// New returns a prober for cfg.
func New(cfg Config) (*Prober, error) {
	switch {
	case cfg.Topology == nil:
		return nil, fmt.Errorf("%w: Topology is required", ErrInvalidConfig)
	case cfg.Key == nil:
		return nil, fmt.Errorf("%w: Key is required", ErrInvalidConfig)
	case cfg.Tools == nil:
		return nil, fmt.Errorf("%w: Tools is required", ErrInvalidConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "main"
	}
	if cfg.Operator == "" {
		cfg.Operator = "prober"
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pub, err := cfg.Key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: Key: %w", ErrInvalidConfig, err)
	}
	return &Prober{cfg: cfg, pub: pub, queue: make(chan schema.Assessment, 1024)}, nil
}

// PublicKey is the key the prober signs with.
func (p *Prober) PublicKey() string { return p.pub }

// Run consumes the assessments (a durable consumer, from the start of the
// stream) and probes every call assessed uncertain and needs_review whose
// tool names a probe, until ctx ends.
func (p *Prober) Run(ctx context.Context) error {
	t := p.cfg.Topology
	cons, err := t.JS.CreateOrUpdateConsumer(ctx, t.Names().StreamName("ASSESSMENTS"), jetstream.ConsumerConfig{
		Durable:       t.Prefix + "-prober-" + p.cfg.Name,
		Description:   "jingwei prober " + p.cfg.Name + ": probes uncertain calls",
		FilterSubject: t.Names().AssessmentsSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Duration(p.cfg.Attempts+1) * (p.cfg.Timeout + p.cfg.Backoff),
	})
	if err != nil {
		return fmt.Errorf("prober: assessments consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(16))
	if err != nil {
		return fmt.Errorf("prober: assessments consumer: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("prober: assessments consumer: %w", err)
		}
		as, err := schema.DecodeAssessments(m.Data())
		if err != nil {
			p.cfg.Logger.Warn().Err(err).Str("subject", m.Subject()).Msg("prober: assessment message not decoded; skipped")
		}
		for _, a := range as {
			if _, err := p.Probe(ctx, a); err != nil && ctx.Err() == nil {
				p.cfg.Logger.Warn().Err(err).Str("session", a.Session).Str("call_id", a.CallID).Msg("prober: call not probed")
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := m.Ack(); err != nil {
			return fmt.Errorf("prober: ack assessment: %w", err)
		}
	}
}

// ErrNotProbed is why Probe left a call alone: no probe applies to it.
var ErrNotProbed = errors.New("prober: not probed")

// Probe probes the call of assessment a, if it is one to probe, and
// publishes its automated review. It returns the published review (nil
// when nothing was published). A call that is not uncertain and
// needs_review, whose tool names no probe, whose contract revision is not
// the tool's, or whose probe is not a read-only tool, is left alone
// (ErrNotProbed). A call whose session is not fenced after it is probed
// with epoch 0: found still settles it (completed), not_found does not. A probe that fails every
// attempt publishes nothing (a nil review and nil error; Observe hears
// Failed).
func (p *Prober) Probe(ctx context.Context, a schema.Assessment) (*schema.Review, error) {
	start := p.cfg.Now()
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionNeedsReview {
		return nil, fmt.Errorf("%w: call %q is %s/%s", ErrNotProbed, a.CallID, a.Outcome, a.Decision)
	}
	tool, ok := p.cfg.Tools.Lookup(a.Tool)
	if !ok || tool.Metadata.Probe == "" {
		return nil, fmt.Errorf("%w: tool %q names no probe", ErrNotProbed, a.Tool)
	}
	if tool.Metadata.Contract != a.Contract {
		return nil, fmt.Errorf("%w: call %q was made under contract %s/%s, the tool now declares %s/%s", ErrNotProbed, a.CallID, a.Contract.Effect, a.Contract.Revision, tool.Metadata.Contract.Effect, tool.Metadata.Contract.Revision)
	}
	probe, ok := p.cfg.Tools.Lookup(tool.Metadata.Probe)
	if !ok {
		return nil, fmt.Errorf("%w: probe %q of tool %q is not registered", ErrNotProbed, tool.Metadata.Probe, a.Tool)
	}
	if probe.Metadata.Contract.Effect != effect.ReadOnly {
		return nil, fmt.Errorf("%w: probe %q is %s, not read_only: never run", ErrNotProbed, probe.Metadata.Name, probe.Metadata.Contract.Effect)
	}
	req, err := p.request(ctx, a)
	if err != nil {
		return nil, err
	}
	req.Tool = probe.Metadata.Name
	res, err := p.run(ctx, probe, req)
	out := Outcome{Session: a.Session, CallID: a.CallID, Tool: a.Tool, Probe: probe.Metadata.Name}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out.Kind, out.Took = Failed, p.cfg.Now().Sub(start)
		p.observe(out)
		p.cfg.Logger.Warn().Err(err).Str("session", a.Session).Str("call_id", a.CallID).Str("probe", probe.Metadata.Name).Msg("probe failed on every attempt: the call is left as it was")
		return nil, nil
	}
	rv := p.review(a, probe, req.Fence.Epoch, res)
	signed, err := recovery.SignReview(p.cfg.Key, rv)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(signed)
	if err != nil {
		return nil, err
	}
	id := "probe-" + a.Session + "-" + a.CallID + "-" + string(signed.Verdict)
	if err := p.publish(ctx, p.cfg.Topology.Names().ReviewsSubject(a.Session), b, id); err != nil {
		return nil, fmt.Errorf("prober: publish review of %q: %w", a.CallID, err)
	}
	out.Verdict, out.Took, out.Kind = signed.Verdict, p.cfg.Now().Sub(start), Settled
	if signed.Verdict == schema.VerdictUncertain {
		out.Kind = Undecided
	}
	p.observe(out)
	p.cfg.Logger.Info().Str("session", a.Session).Str("call_id", a.CallID).Str("probe", probe.Metadata.Name).Str("answer", string(res.Answer)).Str("verdict", string(signed.Verdict)).Msg("automated review published")
	return &signed, nil
}

// publish publishes a signed review on Topology's connection: the prober
// role may read what it probes and publish reviews (stream/access).
func (p *Prober) publish(ctx context.Context, subject string, b []byte, id string) error {
	_, err := p.cfg.Topology.JS.Publish(ctx, subject, b, jetstream.WithMsgID(id))
	return err
}

// Assessed queues an assessment the recovery worker published, for
// RunQueue: how a prober in the recovery worker's process (jingwei serve)
// hears of uncertain calls without a consumer of its own. It never blocks:
// when the queue is full the assessment is dropped (and logged), and the
// call waits for a person as it would without a prober.
func (p *Prober) Assessed(a schema.Assessment) {
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionNeedsReview {
		return
	}
	select {
	case p.queue <- a:
	default:
		p.cfg.Logger.Warn().Str("session", a.Session).Str("call_id", a.CallID).Msg("prober queue full: the call is left for a person")
	}
}

// RunQueue probes the assessments Assessed queues until ctx ends.
func (p *Prober) RunQueue(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-p.queue:
			if _, err := p.Probe(ctx, a); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotProbed) {
				p.cfg.Logger.Warn().Err(err).Str("session", a.Session).Str("call_id", a.CallID).Msg("prober: call not probed")
			}
		}
	}
}

func (p *Prober) observe(o Outcome) {
	if p.cfg.Observe != nil {
		p.cfg.Observe(o)
	}
}

// review is the automated review of a's call for the probe's answer: what
// a probe may conclude (docs/protocol.md §10.1).
func (p *Prober) review(a schema.Assessment, probe worker.Tool, epoch uint64, res Result) schema.Review {
	// A not_found is authoritative only from a probe that declares it so,
	// run with a fence epoch to raise (the session was fenced after the
	// call): otherwise the call's writer could still land its effect.
	authoritative := probe.Metadata.AuthoritativeNotFound && epoch > 0
	v := schema.VerdictUncertain
	switch {
	case res.Answer == Found:
		v = schema.VerdictCompleted
	case res.Answer == NotFound && authoritative:
		v = schema.VerdictNotExecuted
	}
	ev := fmt.Sprintf("probe %s answered %s at fence epoch %d", probe.Metadata.Name, res.Answer, epoch)
	if res.Answer == NotFound && !authoritative {
		ev += " (not authoritative: a late write could still land)"
	}
	if res.Evidence != "" {
		ev += ": " + res.Evidence
	}
	return schema.Review{
		V: schema.Version, Session: a.Session, CallID: a.CallID, Operator: p.cfg.Operator,
		Evidence: truncate(ev, schema.MaxFieldBytes), Verdict: v, Probe: probe.Metadata.Name,
		At: p.cfg.Now().UTC().Format(time.RFC3339),
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
