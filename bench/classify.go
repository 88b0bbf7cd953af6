package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// The targets for the recovery worker's classification: against a
// raw consumer that stores as many assessment-sized messages as the
// recovery worker stores assessments (one message per assessment: the
// naive protocol, where the recovery worker stores its assessments of
// results in batches, one message per session and ack batch), and
// against a bare raw consumer that only acknowledges.
var (
	classifyStoringTarget = Target{Check: RatioAtLeast, Limit: 0.8}
	classifyBareTarget    = Target{Check: RatioAtLeast, Limit: 0.6}
)

// Settings of the raw consumers: no filter subject, AckAll, an ack every
// 256 messages or when nothing is pending, pulls of 512, 1,024
// unacknowledged at most (the recovery worker's settings until it batched
// its assessments; it now acks every 4,096 events, the window its batches
// group over). The raw sides keep 256: measured in adjacent runs on this
// machine, the storing raw consumer was faster with them (181-193k
// events/s against 119-120k with the recovery worker's 4,096, pulls of
// 1,024 and 9,216 unacknowledged) and the bare one no slower (357-362k
// against 280-390k), so they are the stronger baseline.
const (
	rawAckEvery      = 256
	rawMaxAckPending = 4 * rawAckEvery
	rawPull          = 2 * rawAckEvery
	// rawMaxInFlight bounds the storing raw consumer's async publishes
	// whose acks have not arrived (two batches' worth of assessments).
	rawMaxInFlight = 2 * rawAckEvery
	floorPoll      = 3 * time.Millisecond
)

func classifyStep(cfg Config) step {
	events := cfg.n(300_000, 30_000, 3_000)
	what := fmt.Sprintf("recovery worker classification, %d events", events)
	storing := what + " (raw stores as many assessments)"
	bare := what + " (raw only acks)"
	return twoRatioStep("classify", what, natsnode.SyncInterval, "events/s", row{storing, classifyStoringTarget}, row{bare, classifyBareTarget},
		func(ctx context.Context, e *env) (jw, rawStoring, rawBare []float64, err error) {
			return e.classify(ctx, events)
		})
}

// classify measures, per round, events/s of the recovery worker draining
// pre-filled events of finished calls (from its events consumer's creation
// to its ack floor reaching the last event; assessments are stored before
// the ack) against two raw durable consumers with the same settings: one
// that stores one assessment-sized message per finished call (async, with
// bounded in-flight acks, and acknowledges a batch of events once they are
// stored: the naive protocol, one stored message per call outcome, which
// the recovery worker's batches of a session's assessments improve on) and
// one that only acknowledges. Every round fills a fresh topology, the 64
// sessions' calls interleaved call by call as a fleet writes them (the
// recovery worker's batches are per session), that all three read; the
// order of the three rotates from round to round.
func (e *env) classify(ctx context.Context, events int) (jw, rawStoring, rawBare []float64, err error) {
	rounds := min(e.cfg.Rounds, 5)
	var (
		topo *stream.Topology
		sink jetstream.Stream
		f    filled
	)
	drop := func() {
		if sink != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = e.js.DeleteStream(dctx, sink.CachedInfo().Config.Name)
			cancel()
			sink = nil
		}
		e.drop(topo)
		topo = nil
	}
	defer drop()
	prepare := func(ctx context.Context) error {
		drop()
		t, err := e.topology(ctx, e.prefix("cl"))
		if err != nil {
			return err
		}
		topo = t
		// The storing raw consumer's assessments go to a stream of their
		// own with JW_ASSESSMENTS's settings, so the recovery worker's
		// count stays its own.
		sc := topo.Assessments.CachedInfo().Config
		sc.Name, sc.Subjects = sc.Name+"_RAW", []string{topo.Prefix + ".rawbench.assessments.>"}
		if sink, err = e.js.CreateStream(ctx, sc); err != nil {
			return err
		}
		// Interleaved, as a fleet writes: the recovery worker groups its
		// assessments per session, which sessions written one after the
		// other would flatter (the raw sides do not care).
		f, err = fill(ctx, e.nc, topo, fillSpec{name: "s", sessions: 64, events: events, interleave: true})
		return err
	}
	jwRound := func(ctx context.Context) (float64, error) {
		rec, err := recoverer.New(recoverer.Config{Topology: topo, Name: "bench", DisableService: true, Logger: e.log, PlannerKey: e.planner})
		if err != nil {
			return 0, err
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rec.Run(rctx) }()
		d, err := ackFloor(ctx, e.js, topo.Names().StreamName("EVENTS"), topo.Prefix+"-recoverer-bench-events", f.lastSeq, floorPoll, nil)
		cancel()
		if rerr := <-done; err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			return 0, err
		}
		// Every finished call has its assessment (stored before the ack),
		// counted as a reader counts them: by the Jw-Assessment-Id values
		// of the messages, one per member of a batch.
		got, total, msgs, err := countAssessments(ctx, topo)
		if err != nil {
			return 0, err
		}
		if got != f.calls || total != f.calls {
			return 0, fmt.Errorf("recovery worker published %d assessments (%d distinct, in %d messages) for %d finished calls", total, got, msgs, f.calls)
		}
		return rate(f.events, d), nil
	}
	rawRound := func(name string, storing bool) func(ctx context.Context) (float64, error) {
		return func(ctx context.Context) (float64, error) {
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			var subj func(string) string
			if storing {
				subj = func(session string) string { return topo.Prefix + ".rawbench.assessments." + session }
			}
			go func() { done <- rawConsume(rctx, e.nc, topo, name, subj) }()
			d, err := ackFloor(ctx, e.js, topo.Names().StreamName("EVENTS"), name, f.lastSeq, floorPoll, nil)
			cancel()
			if rerr := <-done; err == nil && rerr != nil {
				err = rerr
			}
			if err != nil {
				return 0, err
			}
			if storing {
				info, err := sink.Info(ctx)
				if err != nil {
					return 0, err
				}
				if got := int(info.State.Msgs); got != f.calls {
					return 0, fmt.Errorf("storing raw consumer stored %d messages for %d finished calls", got, f.calls)
				}
			}
			return rate(f.events, d), nil
		}
	}
	sides := []func(context.Context) (float64, error){jwRound, rawRound("raw-storing", true), rawRound("raw-bare", false)}
	got := make([][]float64, len(sides))
	for i := range rounds {
		if err := prepare(ctx); err != nil {
			return nil, nil, nil, err
		}
		for k := range sides {
			j := (i + k) % len(sides) // the order rotates: each side goes first, second and last
			v, err := sides[j](ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			got[j] = append(got[j], v)
		}
	}
	return got[0], got[1], got[2], nil
}

// countAssessments reads every message of JW_ASSESSMENTS as a reader
// must (schema.DecodeAssessments: one assessment or a batch) and returns
// the distinct Jw-Assessment-Id values, all of them (repeats included) and
// the messages; a message that does not decode, or whose header values do
// not name its members in order, is an error.
func countAssessments(ctx context.Context, topo *stream.Topology) (distinct, total, msgs int, err error) {
	info, err := topo.Assessments.Info(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	if info.State.Msgs == 0 {
		return 0, 0, 0, nil
	}
	cons, err := topo.JS.OrderedConsumer(ctx, topo.Names().StreamName("ASSESSMENTS"), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, 0, err
	}
	// One pull iterator, stopped when done: a Next per message left a
	// pull with its 10 s wait behind for each, thousands of them freed
	// only later, in the middle of the next scenario's heap measurement
	// (the held sessions' memory row read ~600 B a session too high).
	it, err := cons.Messages()
	if err != nil {
		return 0, 0, 0, err
	}
	defer it.Stop()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ids := make(map[string]struct{}, info.State.Msgs)
	for range info.State.Msgs {
		m, err := it.Next(jetstream.NextContext(rctx))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("read assessments: %w", err)
		}
		as, err := schema.DecodeAssessments(m.Data())
		if err != nil {
			return 0, 0, 0, fmt.Errorf("assessment message on %s: %w", m.Subject(), err)
		}
		vals := m.Headers().Values(recoverer.HeaderAssessmentID)
		if len(vals) != len(as) {
			return 0, 0, 0, fmt.Errorf("assessment message on %s: %d assessments, %d %s values", m.Subject(), len(as), len(vals), recoverer.HeaderAssessmentID)
		}
		for i, a := range as {
			if want := a.ID(); vals[i] != want {
				return 0, 0, 0, fmt.Errorf("assessment message on %s: member %d is %s, its header value %s", m.Subject(), i, want, vals[i])
			}
			ids[vals[i]] = struct{}{}
			total++
		}
		msgs++
	}
	return len(ids), total, msgs, nil
}

// rawAssessment is the storing raw consumer's message: an encoded
// assessment of a first attempt's completed call as the fill's calls get
// it, with the recovery worker's header.
func rawAssessment() ([]byte, error) {
	id := "c-" + idHole
	return schema.EncodeAssessment(&schema.Assessment{Session: "s-63", CallID: id, Tool: "orders.create", Task: "t-1", Key: "op-" + idHole,
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Outcome: schema.OutcomeCompleted, Evidence: "ok",
		Decision: schema.DecisionRefuse, Attempts: 1, Chain: []string{id}})
}

// resultMark is what marks a tool.result in the fill's encoded events: the
// storing raw consumer's only look into an event.
var resultMark = []byte(`"type":"tool.result"`)

// rawConsume is a raw baseline of classification: a durable pull consumer
// on every session log with the recovery worker's settings, until ctx
// ends. With assessments nil it only acknowledges (every rawAckEvery
// messages, or when nothing is pending). Otherwise it also publishes, for
// every tool.result, one assessment-sized message on assessments(session),
// async with at most rawMaxInFlight acks outstanding, and acknowledges a
// batch of events once that batch's messages are stored: pipelined as far
// as that allows (a full batch's publishes stay in flight while the batch
// before, whose acks normally have arrived, is settled and acknowledged),
// the best a hand-written program doing the same writes would do.
func rawConsume(ctx context.Context, nc *nats.Conn, topo *stream.Topology, name string, assessments func(session string) string) error {
	cons, err := topo.JS.CreateOrUpdateConsumer(ctx, topo.Names().StreamName("EVENTS"), jetstream.ConsumerConfig{
		Durable:       name,
		AckPolicy:     jetstream.AckAllPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       time.Minute,
		MaxAckPending: rawMaxAckPending,
	})
	if err != nil {
		return err
	}
	var (
		js      jetstream.JetStream
		payload []byte
	)
	if assessments != nil {
		if js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(rawMaxInFlight)); err != nil {
			return err
		}
		if payload, err = rawAssessment(); err != nil {
			return err
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(rawPull))
	if err != nil {
		return err
	}
	defer it.Stop()
	type batch struct {
		last jetstream.Msg
		pubs []jetstream.PubAckFuture
	}
	var cur, prev batch
	settle := func(b *batch) error {
		for _, f := range b.pubs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("storing raw consumer: %w", err)
			case <-ctx.Done():
				return nil
			}
		}
		if b.last != nil {
			if err := b.last.Ack(); err != nil {
				return err
			}
		}
		*b = batch{pubs: b.pubs[:0]}
		return nil
	}
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
		if assessments != nil && bytes.Contains(m.Data(), resultMark) {
			msg := nats.NewMsg(assessments(stream.SessionOf(m.Subject())))
			msg.Data = payload
			msg.Header.Set(recoverer.HeaderAssessmentID, "a.s-63.c-0000000001.ok")
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				return err
			}
			cur.pubs = append(cur.pubs, f)
		}
		cur.last = m
		n++
		switch {
		case md.NumPending == 0:
			if err := settle(&prev); err != nil {
				return err
			}
			if err := settle(&cur); err != nil {
				return err
			}
			n = 0
		case n >= rawAckEvery && assessments == nil:
			if err := settle(&cur); err != nil { // nothing to wait for
				return err
			}
			n = 0
		case n >= rawAckEvery:
			if err := settle(&prev); err != nil {
				return err
			}
			prev, cur = cur, batch{pubs: prev.pubs[:0]}
			n = 0
		}
	}
}
