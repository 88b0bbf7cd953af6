package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// appendTarget: fenced appends keep at least 0.9 of the events/s of raw
// publishes with the expected-last-subject-sequence header — the fence
// may cost little over the check JetStream makes anyway.
var appendTarget = Target{Check: RatioAtLeast, Limit: 0.9}

// benchEvent is the event the append scenarios write: a tool.result of
// about 300 bytes encoded.
func benchEvent() schema.Event {
	return schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-00000001", Status: schema.StatusOK,
		Output: json.RawMessage(`"` + strings.Repeat("x", 150) + `"`)}}
}

// encodeFor encodes ev as Log.Append would for session at epoch 1, so a raw
// publish carries a payload of the same size.
func encodeFor(ev schema.Event, session string) ([]byte, error) {
	ev.V, ev.Session, ev.Epoch, ev.At = schema.Version, session, 1, time.Now().UTC()
	return schema.EncodeEvent(ev)
}

func appendSteps(cfg Config, mode natsnode.SyncMode) []step {
	type shape struct{ sessions, perSession int }
	var shapes []shape
	if mode == natsnode.SyncAlways {
		shapes = []shape{{1, cfg.n(800, 200, 20)}, {64, cfg.n(60, 15, 2)}}
	} else {
		shapes = []shape{{1, cfg.n(5000, 1500, 50)}, {64, cfg.n(250, 60, 3)}}
	}
	var steps []step
	for _, sh := range shapes {
		what := "1 session"
		if sh.sessions > 1 {
			what = fmt.Sprintf("%d sessions", sh.sessions)
		}
		name := fmt.Sprintf("append %s (sync=%s)", what, mode)
		steps = append(steps, ratioStep("appends", name, mode, "events/s", appendTarget,
			func(ctx context.Context, e *env) ([]float64, []float64, error) {
				return e.appends(ctx, sh.sessions, sh.perSession)
			}))
	}
	return steps
}

// appends measures, per round, events/s of fenced Log.Append and of raw
// publishes with the expected-last-subject-sequence header, each over
// sessions written concurrently (one goroutine per session, appends in
// order within it), perSession events each.
func (e *env) appends(ctx context.Context, sessions, perSession int) (jw, raw []float64, err error) {
	topo, err := e.topology(ctx, e.prefix("ap"))
	if err != nil {
		return nil, nil, err
	}
	defer e.drop(topo)
	ev := benchEvent()
	jwRound := func(ctx context.Context, round int) (float64, error) {
		logs := make([]*stream.Log, sessions)
		for i := range logs {
			lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("jw-%d-%d", round, i), "bench", 1)
			if err != nil {
				return 0, err
			}
			logs[i] = lg
		}
		d, err := concurrently(ctx, sessions, func(ctx context.Context, i int) error {
			for range perSession {
				if _, err := logs[i].Append(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		return rate(sessions*perSession, d), err
	}
	rawRound := func(ctx context.Context, round int) (float64, error) {
		payloads := make([][]byte, sessions)
		for i := range payloads {
			p, err := encodeFor(ev, fmt.Sprintf("raw-%d-%d", round, i))
			if err != nil {
				return 0, err
			}
			payloads[i] = p
		}
		d, err := concurrently(ctx, sessions, func(ctx context.Context, i int) error {
			subj := topo.Names().EventsSubject(fmt.Sprintf("raw-%d-%d", round, i))
			var last uint64
			for range perSession {
				seq, err := rawAppend(ctx, topo.JS, subj, payloads[i], last)
				if err != nil {
					return err
				}
				last = seq
			}
			return nil
		})
		return rate(sessions*perSession, d), err
	}
	jw, raw, err = alternate(ctx, e.cfg.Rounds, jwRound, rawRound)
	return jw, raw, err
}

// rawAppend is the raw JetStream operation a fenced append is built on: a
// publish that the server refuses unless the subject's last message is
// last. It returns the new message's sequence.
func rawAppend(ctx context.Context, js jetstream.JetStream, subj string, payload []byte, last uint64) (uint64, error) {
	msg := nats.NewMsg(subj)
	msg.Data = payload
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
	if err != nil {
		return 0, fmt.Errorf("raw publish to %s: %w", subj, err)
	}
	return ack.Sequence, nil
}

// concurrently runs f(i) for i in [0, n) on n goroutines and returns how
// long they took together, and the first error.
func concurrently(ctx context.Context, n int, f func(ctx context.Context, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}
