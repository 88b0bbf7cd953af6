package recoverer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// env is one test's embedded server, topology and reviewer key.
type env struct {
	t        *testing.T
	nc       *nats.Conn
	topo     *stream.Topology
	reviewer nkeys.KeyPair
	trusted  recovery.TrustedKeys
	planner  nkeys.KeyPair
}

// setup starts an embedded server with the given lease TTL (0: default).
func setup(t *testing.T, leaseTTL time.Duration) *env {
	t.Helper()
	_, nc, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: leaseTTL, LeaseMarkerTTL: time.Second}})
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, nc: nc, topo: topo, reviewer: kp, trusted: trusted, planner: newPlanner(t)}
}

// recoverer builds a recoverer named name (trusting the env's reviewer).
func (e *env) recoverer(name string, mod ...func(*Config)) *Recoverer {
	e.t.Helper()
	if e.planner == nil {
		e.planner = newPlanner(e.t)
	}
	cfg := Config{Topology: e.topo, Name: name, TrustedReviewers: e.trusted, PlannerKey: e.planner}
	for _, m := range mod {
		m(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// run runs r until the test ends (or stop is called) and fails the test if
// Run returns an error.
func (e *env) run(r *Recoverer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("Run: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// writer appends events to a session log as a tool worker would.
type writer struct {
	t     *testing.T
	lg    *stream.Log
	lease *stream.Lease
	seqs  map[string]uint64
}

func (e *env) writer(session, owner string) *writer {
	e.t.Helper()
	ctx := context.Background()
	lease, err := e.topo.Leases().AcquireLease(ctx, session, owner)
	if err != nil {
		e.t.Fatal(err)
	}
	lg, err := e.topo.Logs().OpenLog(ctx, session, owner, lease.Epoch)
	if err != nil {
		e.t.Fatal(err)
	}
	return &writer{t: e.t, lg: lg, lease: lease, seqs: map[string]uint64{}}
}

func (w *writer) append(ev schema.Event) uint64 {
	w.t.Helper()
	seq, err := w.lg.Append(context.Background(), ev)
	if err != nil {
		w.t.Fatalf("append %s: %v", ev.Type, err)
	}
	return seq
}

// call appends a first attempt (start marker on) of tool under eff.
func (w *writer) call(id, tool string, eff effect.Effect, key string) {
	w.t.Helper()
	w.seqs[id] = w.append(schema.Event{Type: schema.TypeCall, Call: &schema.Call{
		CallID: id, Tool: tool, Arguments: json.RawMessage(`{"n":1}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: key, Contract: effect.Contract{Effect: eff, Revision: "v1"}},
	}})
}

// retry appends a retry of prior (same tool, key, arguments, contract).
func (w *writer) retry(id, prior, tool string, eff effect.Effect, key string) {
	w.t.Helper()
	w.seqs[id] = w.append(schema.Event{Type: schema.TypeCall, Call: &schema.Call{
		CallID: id, Tool: tool, Arguments: json.RawMessage(`{"n":1}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: key, Contract: effect.Contract{Effect: eff, Revision: "v1"},
			Retry: &schema.RetryLink{PriorCallID: prior, PriorSeq: w.seqs[prior], PlanID: recovery.PlanID(w.lg.Session(), prior), Basis: schema.BasisUncertainSafe}},
	}})
}

func (w *writer) started(id string) {
	w.t.Helper()
	w.append(schema.Event{Type: schema.TypeStarted, Started: &schema.Started{CallID: id}})
}

func (w *writer) result(id string, st schema.Status, stage schema.Stage) {
	w.t.Helper()
	w.append(schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: st, Stage: stage, Error: errText(st)}})
}

func errText(st schema.Status) string {
	if st == schema.StatusOK {
		return ""
	}
	return "test: " + string(st)
}

// assessments collects every assessment published, by session and call,
// each member of a batch message on its own, and checks every message as
// a reader must read it: schema.DecodeAssessments, on the message's
// session, one Jw-Assessment-Id value per assessment, in order.
type assessments struct {
	mu   sync.Mutex
	m    map[[2]string][]schema.Assessment
	all  int
	msgs int // messages (a batch is one)
	// bad lists the messages that are not read as above.
	bad []string
}

func (e *env) assessments() *assessments {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	cons, err := e.topo.JS.OrderedConsumer(ctx, e.topo.Names().StreamName("ASSESSMENTS"), jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	as := &assessments{m: map[[2]string][]schema.Assessment{}}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		got, err := schema.DecodeAssessments(m.Data())
		as.mu.Lock()
		defer as.mu.Unlock()
		if err != nil {
			as.bad = append(as.bad, fmt.Sprintf("%s: %v", m.Subject(), err))
			return
		}
		ids := m.Headers().Values(HeaderAssessmentID)
		if len(ids) != len(got) {
			as.bad = append(as.bad, fmt.Sprintf("%s: %d assessments, %d %s values %q", m.Subject(), len(got), len(ids), HeaderAssessmentID, ids))
		}
		as.msgs++
		for i, a := range got {
			if a.Session != stream.SessionOf(m.Subject()) {
				as.bad = append(as.bad, fmt.Sprintf("%s: an assessment of %s", m.Subject(), a.Session))
			}
			if i < len(ids) && ids[i] != a.ID() {
				as.bad = append(as.bad, fmt.Sprintf("%s: member %d has id %q, header says %q", m.Subject(), i, a.ID(), ids[i]))
			}
			k := [2]string{a.Session, a.CallID}
			as.m[k] = append(as.m[k], a)
			as.all++
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cc.Stop()
		as.mu.Lock()
		defer as.mu.Unlock()
		for _, b := range as.bad {
			e.t.Errorf("assessment message not readable as the protocol says: %s", b)
		}
	})
	return as
}

// wait returns the first assessment of the call, failing the test after
// timeout.
func (as *assessments) wait(t *testing.T, session, callID string, timeout time.Duration) schema.Assessment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		as.mu.Lock()
		got := as.m[[2]string{session, callID}]
		as.mu.Unlock()
		if len(got) > 0 {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no assessment of %s/%s within %s", session, callID, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (as *assessments) count(session, callID string) int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return len(as.m[[2]string{session, callID}])
}

// review signs a review of session/callID with kp.
func review(t *testing.T, kp nkeys.KeyPair, session, callID string, v schema.Verdict) schema.Review {
	t.Helper()
	r, err := recovery.SignReview(kp, schema.Review{V: 1, Session: session, CallID: callID, Operator: "alice@ops", Evidence: "ticket-1", Verdict: v, At: "2026-11-30T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// publishReview publishes any JSON-able value on jw.reviews.<subjectSession>.
func (e *env) publishReview(subjectSession string, v any) {
	e.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := e.topo.JS.Publish(context.Background(), e.topo.Names().ReviewsSubject(subjectSession), b); err != nil {
		e.t.Fatal(err)
	}
}

// planMsgs returns the plan messages on JW_PLANS by plan id.
func (e *env) planMsgs() map[string]int {
	e.t.Helper()
	ctx := context.Background()
	info, err := e.topo.PlanLog.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := e.topo.PlanLog.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		var p schema.Plan
		if err := json.Unmarshal(m.Data, &p); err != nil {
			e.t.Fatal(err)
		}
		out[p.PlanID]++
	}
	return out
}

// newPlanner returns a fresh plan-signing key pair.
func newPlanner(t testing.TB) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}
