package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// Targets of plan issuance: at least 0.8 of a raw side making the reads
// and writes the contract requires (a raw side of the create and publish
// alone would hide the reads every issuance must make).
var (
	issueTarget = Target{Check: RatioAtLeast, Limit: 0.8}
	dupTarget   = Target{Check: ValueEqual, Limit: 0}
)

// issuers is how many issuers race for every plan.
const issuers = 4

// maxLoadConsumers is how many consumers settle lets JW_EVENTS reach: under
// nats-server's default limit of 1,000 per stream, with room for the
// recovery workers' own.
const maxLoadConsumers = 900

func issueStep(cfg Config) step {
	// 4 × 200 prepares load 800 histories a round; see settle.
	calls := cfg.n(200, 60, 8)
	name := fmt.Sprintf("plan issuance, %d racing issuers", issuers)
	dupName := "plan issuance: duplicate plans published"
	return step{
		scenario: "issue", name: name, server: natsnode.SyncInterval, rows: []row{{name, issueTarget}, {dupName, dupTarget}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			jw, raw, dups, rawDups, err := e.issue(ctx, calls)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewResult(name, Median(jw), Median(raw), "plans/s", issueTarget),
				NewResult(dupName, float64(dups), float64(rawDups), "plans", dupTarget),
			}, nil
		},
	}
}

// issue measures, per round, plans/s of four recovery workers (each on its
// own connection) racing to issue the plans of the same calls through
// Recoverer.Prepare — the latest review, the history to its leader-known
// end, recovery.PrepareRetry, KV create on the plan id, publish on
// jw.plans.<session> with the plan id as Nats-Msg-Id — against a raw side
// making the reads and writes the contract requires with plain
// nats.go/JetStream calls: four goroutines (each on its own
// connection) each read, for every call of sessions of the same shape,
// the latest review from the stream leader and the history to its
// leader-known end (rawReader: three requests at once), then race a
// kv.Create of a plan-record-sized value on a bucket configured as
// jw_plans; the winner publishes a plan-sized message on the session's
// JW_PLANS subject with the key as Nats-Msg-Id, each loser reads the
// winner's value with a KV get (as a racing issuer must, to return the
// stored plan). It also counts duplicates: plan messages beyond one per
// plan on JW_PLANS, and, raw, creates that succeeded beyond one per key
// plus messages beyond one per key (all must be 0).
func (e *env) issue(ctx context.Context, calls int) (jw, raw []float64, dups, rawDups int, err error) {
	topo, err := e.topology(ctx, e.prefix("pl"))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer e.drop(topo)
	ir := &issueRun{e: e, topo: topo, calls: calls}
	defer ir.close()
	// One topology handle per issuer, each on its own connection.
	ir.topos = make([]*stream.Topology, issuers)
	for i := range ir.topos {
		nc, err := e.srv.Connect()
		if err != nil {
			return nil, nil, 0, 0, err
		}
		ir.conns = append(ir.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		if ir.topos[i], err = stream.OpenTopology(ctx, js, topo.Config()); err != nil {
			return nil, nil, 0, 0, err
		}
	}
	if ir.value, ir.planMsg, err = samplePlanRecord(); err != nil {
		return nil, nil, 0, 0, err
	}
	jw, raw, err = alternate(ctx, e.cfg.Rounds, ir.jwRound, ir.rawRound)
	return jw, raw, ir.dups, ir.rawDups, err
}

// issueRun is one run of the plan-issuance scenario: the issuers'
// topology handles, the sample plan record the raw side writes, and the
// duplicates each side left.
type issueRun struct {
	e              *env
	topo           *stream.Topology
	topos          []*stream.Topology
	conns          []*nats.Conn
	calls          int
	value, planMsg []byte
	dups, rawDups  int
}

func (ir *issueRun) close() {
	for _, nc := range ir.conns {
		nc.Close()
	}
}

// jwRound has every issuer (a recovery worker without its service)
// prepare the plan of every uncertain call of new sessions; the issuers
// must agree on each plan, and each plan is published once.
func (ir *issueRun) jwRound(ctx context.Context, round int) (float64, error) {
	topo := ir.topo
	if err := settle(ctx, topo, issuers*ir.calls); err != nil {
		return 0, err
	}
	sessions, err := uncertainCalls(ctx, topo, fmt.Sprintf("r%d", round), ir.calls)
	if err != nil {
		return 0, err
	}
	recs := make([]*recoverer.Recoverer, issuers)
	for i := range recs {
		if recs[i], err = recoverer.New(recoverer.Config{Topology: ir.topos[i], Name: fmt.Sprintf("issuer%d", i), DisableService: true, Logger: ir.e.log, PlannerKey: ir.e.planner}); err != nil {
			return 0, err
		}
	}
	before, err := topo.PlanLog.Info(ctx)
	if err != nil {
		return 0, err
	}
	ids := make([][]string, issuers)
	d, err := concurrently(ctx, issuers, func(ctx context.Context, i int) error {
		ids[i] = make([]string, len(sessions))
		for j, s := range sessions {
			p, err := recs[i].Prepare(ctx, s, "c-1")
			if err != nil {
				return fmt.Errorf("issuer %d: prepare %s: %w", i, s, err)
			}
			ids[i][j] = p.PlanID
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i := 1; i < issuers; i++ {
		for j := range sessions {
			if ids[i][j] != ids[0][j] {
				return 0, fmt.Errorf("issuers disagree on the plan of %s: %s vs %s", sessions[j], ids[0][j], ids[i][j])
			}
		}
	}
	after, err := topo.PlanLog.Info(ctx)
	if err != nil {
		return 0, err
	}
	ir.dups += int(after.State.Msgs-before.State.Msgs) - len(sessions)
	return rate(len(sessions), d), nil
}

// rawRound makes the same reads and writes with plain JetStream calls: a
// bucket configured as jw_plans is (History 1, file storage, the
// topology's replicas); the plan messages go to JW_PLANS itself, on the
// raw sessions' subjects.
func (ir *issueRun) rawRound(ctx context.Context, round int) (float64, error) {
	topo := ir.topo
	if err := settle(ctx, topo, issuers*ir.calls); err != nil {
		return 0, err
	}
	sessions, err := uncertainCalls(ctx, topo, fmt.Sprintf("raw%d", round), ir.calls)
	if err != nil {
		return 0, err
	}
	readers := make([]*rawReader, issuers)
	for i := range readers {
		kv, err := ir.topos[i].JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: topo.Prefix + "_raw", History: 1, Storage: jetstream.FileStorage, Replicas: topo.Config().Replicas})
		if err != nil {
			return 0, err
		}
		if readers[i], err = newRawReader(ir.topos[i], kv); err != nil {
			return 0, err
		}
		defer readers[i].close()
	}
	before, err := topo.PlanLog.Info(ctx)
	if err != nil {
		return 0, err
	}
	var won atomic.Int64
	d, err := concurrently(ctx, issuers, func(ctx context.Context, i int) error {
		return ir.rawIssue(ctx, i, readers[i], round, sessions, &won)
	})
	if err != nil {
		return 0, err
	}
	after, err := topo.PlanLog.Info(ctx)
	if err != nil {
		return 0, err
	}
	ir.rawDups += int(won.Load()) - ir.calls + int(after.State.Msgs-before.State.Msgs) - ir.calls
	return rate(ir.calls, d), nil
}

// rawIssue is one raw issuer's pass over the sessions: read, race the
// others with a KV create; the winner publishes the plan (its id as
// Msg-Id), a loser reads the winner's record.
func (ir *issueRun) rawIssue(ctx context.Context, i int, rd *rawReader, round int, sessions []string, won *atomic.Int64) error {
	for j, s := range sessions {
		if err := rd.read(ctx, s); err != nil {
			return fmt.Errorf("raw read %s: %w", s, err)
		}
		key := fmt.Sprintf("p-%d-%d", round, j)
		_, err := rd.kv.Create(ctx, key, ir.value)
		switch {
		case err == nil:
			won.Add(1)
			msg := nats.NewMsg(ir.topo.Names().PlansSubject(s))
			msg.Data = ir.planMsg
			if _, err := ir.topos[i].JS.PublishMsg(ctx, msg, jetstream.WithMsgID(key)); err != nil {
				return fmt.Errorf("raw publish: %w", err)
			}
		case errors.Is(err, jetstream.ErrKeyExists):
			if _, err := rd.kv.Get(ctx, key); err != nil {
				return fmt.Errorf("raw get: %w", err)
			}
		default:
			return fmt.Errorf("raw create: %w", err)
		}
	}
	return nil
}

// settle waits until JW_EVENTS has room for loads more consumers.
// nats-server 2.15 allows 1,000 consumers per stream by default; history
// reads no longer create consumers (stream.Load and LoadForPlan use
// message and direct gets), so this is only a guard that a round starts
// with nothing of an earlier round's left on the stream.
func settle(ctx context.Context, topo *stream.Topology, loads int) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return waitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		info, err := topo.Events.Info(wctx)
		if err != nil {
			return false, err
		}
		return info.State.Consumers+loads <= maxLoadConsumers, nil
	})
}

// uncertainCalls writes n sessions <name>-<i>, each with one finished call
// c-1 of an idempotent tool that failed after it started: uncertain, and
// retry_allowed (basis uncertain_safe). It returns the session ids.
func uncertainCalls(ctx context.Context, topo *stream.Topology, name string, n int) ([]string, error) {
	contract := effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s-%d", name, i)
		lg, err := topo.Logs().OpenLog(ctx, s, "bench-writer", 1)
		if err != nil {
			return nil, err
		}
		for _, ev := range []schema.Event{
			{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
				Operation: &schema.Operation{Task: "t-1", Key: fmt.Sprintf("op-%032d", i), Contract: contract}}},
			{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
			{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "upstream 503"}},
		} {
			if _, err := lg.Append(ctx, ev); err != nil {
				return nil, err
			}
		}
		out[i] = s
	}
	return out, nil
}

// samplePlanRecord returns a jw_plans value and a JW_PLANS message of the
// sizes the recovery worker stores and publishes (a signed plan), for the
// raw side.
func samplePlanRecord() (record, msg []byte, err error) {
	plan := schema.Plan{
		V: schema.Version, PlanID: "p-" + strings.Repeat("0", 32), Session: "r0-0", Task: "t-1", Tool: "orders.create",
		Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), ArgsDigest: "sha256:" + strings.Repeat("0", 64),
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}, Key: "op-" + strings.Repeat("0", 32),
		PriorCallID: "c-1", PriorSeq: 1, Basis: schema.BasisUncertainSafe, IssuedAt: time.Now().UTC().Truncate(time.Second),
		Signer: "U" + strings.Repeat("A", 55), Sig: strings.Repeat("A", 86),
	}
	if record, err = json.Marshal(stream.PlanRecord{State: stream.PlanIssued, Plan: plan}); err != nil {
		return nil, nil, err
	}
	if msg, err = json.Marshal(plan); err != nil {
		return nil, nil, err
	}
	return record, msg, nil
}

// rawReader makes, for the raw side of plan issuance, the reads the
// contract requires before a plan is created: the latest review of the
// session from the stream leader (a message get, last by subject, on
// JW_REVIEWS), the history up to its leader-known end (the stream
// leader's last message of the session, and a batched direct get of the
// session's events from the first one, cut at that end). The three
// requests go out at once on one connection and their answers come back
// on one subscription made once per issuer: the cheapest way plain
// nats.go can make those reads.
type rawReader struct {
	t      *stream.Topology
	kv     jetstream.KeyValue
	sub    *nats.Subscription
	prefix string
	gen    uint64
	// The request bodies' subjects, per stream.
	reviewsGet, eventsGet, eventsDirect string
}

func newRawReader(t *stream.Topology, kv jetstream.KeyValue) (*rawReader, error) {
	nc := t.JS.Conn()
	r := &rawReader{t: t, kv: kv, prefix: nc.NewInbox() + ".",
		reviewsGet:   "$JS.API.STREAM.MSG.GET." + t.Names().StreamName("REVIEWS"),
		eventsGet:    "$JS.API.STREAM.MSG.GET." + t.Events.CachedInfo().Config.Name,
		eventsDirect: "$JS.API.DIRECT.GET." + t.Events.CachedInfo().Config.Name,
	}
	sub, err := nc.SubscribeSync(r.prefix + ">")
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	r.sub = sub
	return r, nil
}

func (r *rawReader) close() { _ = r.sub.Unsubscribe() }

// rawGetAnswer is the part of a STREAM.MSG.GET answer the raw side reads.
type rawGetAnswer struct {
	Error *struct {
		Code int `json:"err_code"`
	} `json:"error,omitempty"`
	Msg *struct {
		Sequence uint64 `json:"seq"`
	} `json:"message,omitempty"`
}

// read makes the three reads for session and checks their answers: a
// review answer or "no message", the leader's tail, and a batch that
// reaches it.
func (r *rawReader) read(ctx context.Context, session string) error {
	nc := r.t.JS.Conn()
	r.gen++
	pre := r.prefix + strconv.FormatUint(r.gen, 36) + "."
	rv, _ := json.Marshal(map[string]string{"last_by_subj": r.t.Names().ReviewsSubject(session)})
	tl, _ := json.Marshal(map[string]string{"last_by_subj": r.t.Names().EventsSubject(session)})
	bt, _ := json.Marshal(map[string]any{"seq": 1, "next_by_subj": r.t.Names().EventsSubject(session), "batch": 1000, "max_bytes": 4 << 20})
	if err := nc.PublishRequest(r.reviewsGet, pre+"r", rv); err != nil {
		return err
	}
	if err := nc.PublishRequest(r.eventsGet, pre+"t", tl); err != nil {
		return err
	}
	if err := nc.PublishRequest(r.eventsDirect, pre+"b", bt); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		haveReview, haveTail, haveBatch bool
		end, last                       uint64
	)
	for !haveReview || !haveTail || !haveBatch {
		m, err := r.sub.NextMsgWithContext(ctx)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(m.Subject, pre) {
			continue // an answer to an earlier read
		}
		switch m.Subject[len(pre):] {
		case "r", "t":
			var a rawGetAnswer
			if err := json.Unmarshal(m.Data, &a); err != nil {
				return err
			}
			if a.Error != nil && a.Error.Code != 10037 {
				return fmt.Errorf("message get: error %d", a.Error.Code)
			}
			if m.Subject[len(pre):] == "r" {
				haveReview = true
				continue
			}
			if a.Msg == nil {
				return errors.New("no history")
			}
			end, haveTail = a.Msg.Sequence, true
		case "b":
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				if m.Header.Get("Status") != "204" {
					return fmt.Errorf("batch: status %s", m.Header.Get("Status"))
				}
				haveBatch = true
				continue
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return err
			}
			last = max(last, seq)
		}
	}
	if last < end {
		return fmt.Errorf("batch ends at %d, the leader at %d", last, end)
	}
	return nil
}
