package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// The targets for the pipeline call (an agent's call through
// jw.api.call, a tool worker and back): one caller's p50 at most 1.5 ms
// with sync=interval and 4 ms with sync=always, its p99 at most 3 times
// its p50; 16 callers at least half the calls/s of the in-process runtime
// with 16 sessions; against the raw JetStream request/reply plus the same
// two appends it is built on, at least 0.8 of its calls/s and at most
// 1/0.8 of its latency; at most 3 durable writes (fsyncs with
// sync=always) per call.
var (
	pipelineP50      = map[natsnode.SyncMode]float64{natsnode.SyncInterval: 1.5, natsnode.SyncAlways: 4}
	pipelineTail     = Target{Check: RatioAtMost, Limit: 3, Text: "p99 <= 3 x p50"}
	pipelineRate     = Target{Check: RatioAtLeast, Limit: 0.8}
	pipelineLatency  = Target{Check: RatioAtMost, Limit: 1.25, Text: "ratio <= 1.25 (raw/jw >= 0.8)"}
	pipelineRuntime  = Target{Check: RatioAtLeast, Limit: 0.5}
	pipelineDurables = Target{Check: ValueAtMost, Limit: 3}
)

// pipelineCallers is the "many callers" side: callers at once, each on a
// session of its own.
const pipelineCallers = 16

func pipelineStep(cfg Config, mode natsnode.SyncMode) step {
	calls1, calls16 := cfg.n(400, 100, 10), cfg.n(60, 20, 3)
	if mode == natsnode.SyncAlways {
		calls1, calls16 = cfg.n(150, 50, 10), cfg.n(25, 10, 3)
	}
	m := fmt.Sprintf("(sync=%s)", mode)
	rows := []row{
		{"pipeline call, 1 caller: p50 ms (raw: request/reply + 2 appends) " + m, Target{Check: ValueAtMost, Limit: pipelineP50[mode]}},
		{"pipeline call, 1 caller: p99 ms (raw: its p50) " + m, pipelineTail},
		{"pipeline call, 1 caller: p50 vs raw request/reply + 2 appends " + m, pipelineLatency},
		{"pipeline call, 1 caller: calls/s vs raw request/reply + 2 appends " + m, pipelineRate},
		{fmt.Sprintf("pipeline call, %d callers: calls/s vs in-process runtime, %d sessions %s", pipelineCallers, pipelineCallers, m), pipelineRuntime},
		{fmt.Sprintf("pipeline call, %d callers: calls/s vs raw request/reply + 2 appends %s", pipelineCallers, m), pipelineRate},
		{fmt.Sprintf("pipeline call, %d callers: p50 vs raw request/reply + 2 appends %s", pipelineCallers, m), pipelineLatency},
		{fmt.Sprintf("pipeline call, %d callers: p99 vs raw request/reply + 2 appends %s", pipelineCallers, m), pipelineLatency},
	}
	if mode == natsnode.SyncAlways {
		rows = append(rows, row{"pipeline call: durable writes (fsyncs) per call (raw: request/reply + 2 appends) " + m, pipelineDurables})
	}
	return step{scenario: "pipeline", name: "pipeline call through jw.api.call " + m, server: mode, rows: rows,
		run: func(ctx context.Context, e *env) ([]Result, error) {
			p, err := e.pipeline(ctx, calls1, calls16)
			if err != nil {
				return nil, err
			}
			out := []Result{
				NewResult(rows[0].name, Percentile(p.lat1, 50), Percentile(p.raw1, 50), "ms", rows[0].target),
				NewResult(rows[1].name, Percentile(p.lat1, 99), Percentile(p.lat1, 50), "ms", rows[1].target),
				NewResult(rows[2].name, Percentile(p.lat1, 50), Percentile(p.raw1, 50), "ms", rows[2].target),
				NewResult(rows[3].name, Median(p.rate1), Median(p.rawRate1), "calls/s", rows[3].target),
				NewResult(rows[4].name, Median(p.rate16), Median(p.rtRate16), "calls/s", rows[4].target),
				NewResult(rows[5].name, Median(p.rate16), Median(p.rawRate16), "calls/s", rows[5].target),
				NewResult(rows[6].name, Percentile(p.lat16, 50), Percentile(p.raw16, 50), "ms", rows[6].target),
				NewResult(rows[7].name, Percentile(p.lat16, 99), Percentile(p.raw16, 99), "ms", rows[7].target),
			}
			if mode == natsnode.SyncAlways {
				out = append(out, NewResult(rows[8].name, Median(p.writes), Median(p.rawWrites), "writes", rows[8].target))
			}
			return out, nil
		}}
}

// pipelineFigures is what one pipeline step measured: latencies in ms of
// every call (all rounds pooled), calls/s and durable writes per call per
// round.
type pipelineFigures struct {
	lat1, raw1, lat16, raw16    []float64
	rate1, rawRate1             []float64
	rate16, rawRate16, rtRate16 []float64
	writes, rawWrites           []float64
	latMu                       sync.Mutex
}

func (p *pipelineFigures) add(into *[]float64, d time.Duration) {
	p.latMu.Lock()
	*into = append(*into, float64(d)/float64(time.Millisecond))
	p.latMu.Unlock()
}

// pipeline measures, in rounds that rotate the sides, a no-op tool called
// through jw.api.call (a service client on the bench's connection, a
// toolworker.Worker with its gateway on a connection of its own) against
// the raw operations it is built on: a JetStream publish to a work queue
// (with a reply inbox in a header), a pull consumer on its own connection
// that appends a tool.call and a tool.result with the expected-sequence
// header, acknowledges the request and publishes the result's seq to the
// inbox. One caller, then pipelineCallers callers on a session each, and
// the in-process runtime (worker.Runtime) with as many sessions.
func (e *env) pipeline(ctx context.Context, calls1, calls16 int) (*pipelineFigures, error) {
	topo, err := e.topology(ctx, e.prefix("pl"))
	if err != nil {
		return nil, err
	}
	defer e.drop(topo)
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(contract.Effect, contract.Revision),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		return nil, err
	}
	pr := &pipelineRun{e: e, topo: topo, reg: reg, args: json.RawMessage(`{"sku":"A-1","qty":1}`), calls1: calls1, calls16: calls16, p: &pipelineFigures{}}
	stop, err := pr.startToolWorker(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	if pr.raw, err = e.startRawWorker(ctx, topo); err != nil {
		return nil, err
	}
	defer pr.raw.stop()
	if _, err := rotate(ctx, e.cfg.Rounds, pr.one, pr.rawOne); err != nil {
		return nil, err
	}
	pr.plans, pr.budget = stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	if _, err := rotate(ctx, e.cfg.Rounds, pr.many, pr.rawMany, pr.runtimeMany); err != nil {
		return nil, err
	}
	return pr.p, nil
}

// pipelineRun is one run of the pipeline scenario: the topology, the
// tool worker's client, the raw side, and the figures its rounds add to.
type pipelineRun struct {
	e               *env
	topo            *stream.Topology
	reg             *worker.Registry
	args            json.RawMessage
	calls1, calls16 int
	cl              *service.Client
	raw             *rawWorker
	plans           *stream.Plans
	budget          *stream.Budget
	p               *pipelineFigures
}

// startToolWorker starts a tool worker on a connection of its own, waits
// until it owns every partition and answers a call, and returns how to
// stop it.
func (pr *pipelineRun) startToolWorker(ctx context.Context) (stop func(), err error) {
	e, topo := pr.e, pr.topo
	wnc, err := e.srv.Connect()
	if err != nil {
		return nil, err
	}
	wjs, err := jetstream.New(wnc)
	if err != nil {
		wnc.Close()
		return nil, err
	}
	wtopo, err := stream.OpenTopology(ctx, wjs, topo.Config())
	if err != nil {
		wnc.Close()
		return nil, err
	}
	tw, err := toolworker.New(toolworker.Config{Topology: wtopo, Registry: pr.reg, Logger: e.log})
	if err != nil {
		wnc.Close()
		return nil, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tw.Run(wctx) }()
	stop = func() { stopWorker(); <-done; wnc.Close() }
	if err := waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		return len(tw.OwnedPartitions()) == topo.Names().Partitions(), nil
	}); err != nil {
		stop()
		return nil, err
	}
	pr.cl = service.NewClient(e.nc, service.ClientConfig{Prefix: topo.Prefix, Timeout: 30 * time.Second})
	if err := waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		_, err := pr.cl.Call(ctx, schema.Request{V: 1, RequestID: "warm", Session: "warm", Task: worker.DefaultTask, Tool: "noop", Arguments: pr.args})
		return err == nil, nil
	}); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// call makes one call through jw.api.call and adds its latency to into.
func (pr *pipelineRun) call(ctx context.Context, session string, i int, into *[]float64) error {
	t0 := time.Now()
	ev, err := pr.cl.Call(ctx, schema.Request{V: 1, RequestID: fmt.Sprintf("r-%d", i), Session: session, Task: worker.DefaultTask, Tool: "noop", Arguments: pr.args})
	if err != nil {
		return fmt.Errorf("pipeline call: %w", err)
	}
	if ev.Result == nil || ev.Result.Status != schema.StatusOK {
		return fmt.Errorf("pipeline call: %+v", ev.Result)
	}
	pr.p.add(into, time.Since(t0))
	return nil
}

// counted runs f and adds to into the server's durable writes per call
// it made.
func (pr *pipelineRun) counted(calls int, into *[]float64, f func() error) error {
	before, err := pr.e.durableWrites()
	if err != nil {
		return err
	}
	if err := f(); err != nil {
		return err
	}
	after, err := pr.e.durableWrites()
	if err != nil {
		return err
	}
	*into = append(*into, float64(after-before)/float64(calls))
	return nil
}

// one is a round of one caller through the pipeline.
func (pr *pipelineRun) one(ctx context.Context, round int) (float64, error) {
	session := fmt.Sprintf("p1-%d", round)
	start := time.Now()
	err := pr.counted(pr.calls1, &pr.p.writes, func() error {
		for i := range pr.calls1 {
			if err := pr.call(ctx, session, i, &pr.p.lat1); err != nil {
				return err
			}
		}
		return nil
	})
	r := rate(pr.calls1, time.Since(start))
	pr.p.rate1 = append(pr.p.rate1, r)
	return r, err
}

// rawOne is a round of one caller on the raw side.
func (pr *pipelineRun) rawOne(ctx context.Context, round int) (float64, error) {
	session := fmt.Sprintf("r1-%d", round)
	start := time.Now()
	err := pr.counted(pr.calls1, &pr.p.rawWrites, func() error {
		for range pr.calls1 {
			if err := pr.raw.call(ctx, session, &pr.p.raw1, pr.p); err != nil {
				return err
			}
		}
		return nil
	})
	r := rate(pr.calls1, time.Since(start))
	pr.p.rawRate1 = append(pr.p.rawRate1, r)
	return r, err
}

// many is a round of pipelineCallers callers through the pipeline.
func (pr *pipelineRun) many(ctx context.Context, round int) (float64, error) {
	d, err := concurrently(ctx, pipelineCallers, func(ctx context.Context, c int) error {
		session := fmt.Sprintf("p16-%d-%d", round, c)
		for i := range pr.calls16 {
			if err := pr.call(ctx, session, i, &pr.p.lat16); err != nil {
				return err
			}
		}
		return nil
	})
	r := rate(pipelineCallers*pr.calls16, d)
	pr.p.rate16 = append(pr.p.rate16, r)
	return r, err
}

// rawMany is a round of pipelineCallers callers on the raw side.
func (pr *pipelineRun) rawMany(ctx context.Context, round int) (float64, error) {
	d, err := concurrently(ctx, pipelineCallers, func(ctx context.Context, c int) error {
		session := fmt.Sprintf("r16-%d-%d", round, c)
		for range pr.calls16 {
			if err := pr.raw.call(ctx, session, &pr.p.raw16, pr.p); err != nil {
				return err
			}
		}
		return nil
	})
	r := rate(pipelineCallers*pr.calls16, d)
	pr.p.rawRate16 = append(pr.p.rawRate16, r)
	return r, err
}

// runtimeMany is a round of pipelineCallers in-process runtimes, each on
// a session log of its own: what the pipeline adds to is measured
// against it.
func (pr *pipelineRun) runtimeMany(ctx context.Context, round int) (float64, error) {
	rts := make([]*worker.Runtime, pipelineCallers)
	for c := range rts {
		lg, err := pr.topo.Logs().OpenLog(ctx, fmt.Sprintf("rt16-%d-%d", round, c), "bench", 1)
		if err != nil {
			return 0, err
		}
		if rts[c], err = worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: pr.reg, Plans: pr.plans, Budget: pr.budget}); err != nil {
			return 0, err
		}
	}
	d, err := concurrently(ctx, pipelineCallers, func(ctx context.Context, c int) error {
		for range pr.calls16 {
			res, err := rts[c].Call(ctx, "noop", pr.args)
			if err != nil {
				return err
			}
			if res.Status != schema.StatusOK {
				return fmt.Errorf("runtime call: status %q: %s", res.Status, res.Error)
			}
		}
		return nil
	})
	r := rate(pipelineCallers*pr.calls16, d)
	pr.p.rtRate16 = append(pr.p.rtRate16, r)
	return r, err
}

// durableWrites counts the writes the server's file store makes durable
// (each an fsync with sync=always) since it started, in the streams with
// the default persist mode (an async one, such as the request queue on one
// server, writes in batches and fsyncs only with the server's sync
// interval): every message stored (a stream's last sequence), every
// message a work queue or interest
// stream removed on an acknowledgement (a tombstone; a KV bucket's old
// revisions go by limits, without one), and every state write of a file
// consumer with explicit acks (one per delivery and one per
// acknowledgement; the server may merge some, so this is an upper bound).
func (e *env) durableWrites() (int64, error) {
	jsz, err := e.srv.Server().Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, a := range jsz.AccountDetails {
		for _, s := range a.Streams {
			if s.Config != nil && s.Config.PersistMode == server.AsyncPersistMode {
				continue // flushed in batches, fsynced with the sync interval only
			}
			n += int64(s.State.LastSeq)
			if s.Config != nil && s.Config.Retention != server.LimitsPolicy {
				n += int64(s.State.LastSeq) - int64(s.State.Msgs)
			}
			for _, c := range s.Consumer {
				if c == nil || c.Config == nil || c.Config.MemoryStorage || c.Config.AckPolicy != server.AckExplicit {
					continue
				}
				n += int64(c.Delivered.Consumer) + int64(c.AckFloor.Consumer)
			}
		}
	}
	return n, nil
}

// rawWorker is the raw side of the pipeline: a work queue, a pull consumer
// on a connection of its own (its state in memory, as the tool worker's
// request consumers), two expected-sequence appends per request, the
// acknowledgement and a core reply.
type rawWorker struct {
	e      *env
	topo   *stream.Topology
	subj   string
	nc     *nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	call1  []byte // tool.call payload template
	result []byte
}

// rawReplyHeader carries the raw caller's inbox on a raw request.
const rawReplyHeader = "Bench-Reply"

func (e *env) startRawWorker(ctx context.Context, topo *stream.Topology) (*rawWorker, error) {
	name := strings.ToUpper(topo.Prefix) + "_RAWQ"
	subj := topo.Prefix + ".rawq"
	// The same durability as the pipeline's request queue.
	persist := topo.Requests.CachedInfo().Config.PersistMode
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj + ".>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, PersistMode: persist})
	if err != nil {
		return nil, err
	}
	nc, err := e.srv.Connect()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, st.CachedInfo().Config.Name, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000, MemoryStorage: true})
	if err != nil {
		nc.Close()
		return nil, err
	}
	id := "c-" + strings.Repeat("0", 32)
	contract := effect.Contract{Effect: effect.ReadOnly, Revision: "noop-v1"}
	r := &rawWorker{e: e, topo: topo, subj: subj, nc: nc}
	r.call1, err = encodeFor(schema.Event{Type: schema.TypeCall, Call: &schema.Call{CallID: id, Tool: "noop", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), Started: true,
		Operation: &schema.Operation{Task: worker.DefaultTask, Key: "op-" + strings.Repeat("0", 32), Contract: contract}}}, "raw")
	if err != nil {
		nc.Close()
		return nil, err
	}
	if r.result, err = encodeFor(schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.StatusOK}}, "raw"); err != nil {
		nc.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	it, err := cons.Messages()
	if err != nil {
		cancel()
		nc.Close()
		return nil, err
	}
	sessions := map[string]chan jetstream.Msg{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		go func() { <-rctx.Done(); it.Stop() }()
		for {
			m, err := it.Next()
			if err != nil {
				for _, ch := range sessions {
					close(ch)
				}
				return
			}
			session := strings.TrimPrefix(m.Subject(), subj+".")
			ch := sessions[session]
			if ch == nil {
				ch = make(chan jetstream.Msg, 64)
				sessions[session] = ch
				r.wg.Add(1)
				go func() { defer r.wg.Done(); r.serve(rctx, js, session, ch) }()
			}
			ch <- m
		}
	}()
	return r, nil
}

// serve runs one session's raw requests in order: the two appends, the
// acknowledgement, the reply.
func (r *rawWorker) serve(ctx context.Context, js jetstream.JetStream, session string, ch <-chan jetstream.Msg) {
	subj := r.topo.Names().EventsSubject(session)
	var last uint64
	for m := range ch {
		var err error
		if last, err = rawAppend(ctx, js, subj, r.call1, last); err != nil {
			continue
		}
		if last, err = rawAppend(ctx, js, subj, r.result, last); err != nil {
			continue
		}
		_ = m.Ack()
		if inbox := m.Headers().Get(rawReplyHeader); inbox != "" {
			_ = r.nc.Publish(inbox, []byte(fmt.Sprint(last)))
		}
	}
}

// call is one raw call on session: publish, wait for the reply.
func (r *rawWorker) call(ctx context.Context, session string, into *[]float64, p *pipelineFigures) error {
	inbox := r.e.nc.NewInbox()
	sub, err := r.e.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	t0 := time.Now()
	msg := nats.NewMsg(r.subj + "." + session)
	msg.Data = []byte(`{"v":1,"tool":"noop","arguments":{"sku":"A-1","qty":1}}`)
	msg.Header.Set(rawReplyHeader, inbox)
	if _, err := r.e.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("raw request: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := sub.NextMsgWithContext(wctx); err != nil {
		return fmt.Errorf("raw reply: %w", err)
	}
	p.add(into, time.Since(t0))
	return nil
}

func (r *rawWorker) stop() {
	r.cancel()
	r.wg.Wait()
	r.nc.Close()
}
