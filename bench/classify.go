package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// classifyTarget is issue 7's target for the recovery worker's
// classification.
var classifyTarget = Target{Check: RatioAtLeast, Limit: 0.7}

// Settings of the raw consumer: the recovery worker's own (no filter
// subject, AckAll, 1,024 unacknowledged at most, pulls of 512, an ack every
// 256 messages or when nothing is pending), so the raw side differs only in
// doing nothing with the events.
const (
	rawAckEvery      = 256
	rawMaxAckPending = 4 * rawAckEvery
	rawPull          = 2 * rawAckEvery
	floorPoll        = 3 * time.Millisecond
)

func classifyStep(cfg Config) step {
	events := cfg.n(300_000, 30_000, 3_000)
	name := fmt.Sprintf("recovery worker classification, %d events", events)
	return ratioStep("classify", name, stream.SyncInterval, "events/s", classifyTarget,
		func(ctx context.Context, e *env) ([]float64, []float64, error) {
			return e.classify(ctx, events)
		})
}

// classify measures, per round, events/s of the recovery worker draining
// pre-filled events of finished calls (from its events consumer's creation
// to its ack floor reaching the last event; assessments are published
// before the ack) against a raw durable consumer with the same settings
// that only acks. Every round fills a fresh topology and both read it.
func (e *env) classify(ctx context.Context, events int) (jw, raw []float64, err error) {
	rounds := min(e.cfg.Rounds, 5)
	var (
		topo *stream.Topology
		f    filled
	)
	defer func() { e.drop(topo) }()
	prepare := func(ctx context.Context) error {
		e.drop(topo)
		topo = nil
		t, err := e.topology(ctx, e.prefix("cl"))
		if err != nil {
			return err
		}
		topo = t
		f, err = fill(ctx, e.nc, topo, fillSpec{name: "s", sessions: 64, events: events})
		return err
	}
	jwRound := func(ctx context.Context, round int) (float64, error) {
		if round%2 == 0 { // jingwei goes first: fill
			if err := prepare(ctx); err != nil {
				return 0, err
			}
		}
		rec, err := recoverer.New(recoverer.Config{Topology: topo, Name: "bench", DisableService: true, Logger: e.log, PlannerKey: e.planner})
		if err != nil {
			return 0, err
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rec.Run(rctx) }()
		d, err := ackFloor(ctx, e.js, topo.StreamName("EVENTS"), topo.Prefix+"-recoverer-bench-events", f.lastSeq, floorPoll, nil)
		cancel()
		if rerr := <-done; err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			return 0, err
		}
		// Every finished call has its assessment (published before the ack).
		info, err := topo.Assessments.Info(ctx)
		if err != nil {
			return 0, err
		}
		if got := int(info.State.Msgs); got != f.calls {
			return 0, fmt.Errorf("recovery worker published %d assessments for %d finished calls", got, f.calls)
		}
		return rate(f.events, d), nil
	}
	rawRound := func(ctx context.Context, round int) (float64, error) {
		if round%2 == 1 { // raw goes first: fill
			if err := prepare(ctx); err != nil {
				return 0, err
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- rawConsume(rctx, topo, "raw-bench") }()
		d, err := ackFloor(ctx, e.js, topo.StreamName("EVENTS"), "raw-bench", f.lastSeq, floorPoll, nil)
		cancel()
		if rerr := <-done; err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			return 0, err
		}
		return rate(f.events, d), nil
	}
	return alternate(ctx, rounds, jwRound, rawRound)
}

// rawConsume is the raw baseline of classification: a durable pull
// consumer on every session log that acknowledges what it gets and does
// nothing else, until ctx ends.
func rawConsume(ctx context.Context, topo *stream.Topology, name string) error {
	cons, err := topo.JS.CreateOrUpdateConsumer(ctx, topo.StreamName("EVENTS"), jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckAllPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: rawMaxAckPending,
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(rawPull))
	if err != nil {
		return err
	}
	defer it.Stop()
	n := 0
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		n++
		if n >= rawAckEvery || md.NumPending == 0 {
			if err := m.Ack(); err != nil {
				return err
			}
			n = 0
		}
	}
}
