package toolworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

func TestConfigValidation(t *testing.T) {
	topo := setup(t)
	reg := registry(t)
	tests := []struct {
		name string
		cfg  toolworker.Config
		ok   bool
	}{
		{"minimal", toolworker.Config{Topology: topo, Registry: reg}, true},
		{"no topology", toolworker.Config{Registry: reg}, false},
		{"no registry", toolworker.Config{Topology: topo}, false},
		{"renew not shorter than ttl", toolworker.Config{Topology: topo, Registry: reg, RenewInterval: time.Second}, false},
		{"owner too long", toolworker.Config{Topology: topo, Registry: reg, Owner: string(make([]byte, 300))}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := toolworker.New(tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, toolworker.ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
			if err == nil && w.Owner() == "" {
				t.Fatal("no default owner")
			}
		})
	}
	d := toolworker.Config{Topology: topo}.WithDefaults()
	if d.RenewInterval != topo.Config().LeaseTTL/3 || d.MaxSessions != toolworker.DefaultMaxSessions || d.IdleTimeout != toolworker.DefaultIdleTimeout {
		t.Fatalf("defaults: %+v", d)
	}
}

// Requests of many sessions spread over two workers (each may own at most
// three sessions); every session's requests run once each, in publish
// order, and every request is acknowledged.
func TestRequestsSpreadAndRunInOrder(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	const sessions, perSession = 6, 8
	for i := range sessions {
		for n := range perSession {
			publish(t, topo, sessionName(i), fmt.Sprintf("r-%d-%d", i, n), "echo", fmt.Sprintf(`{"n":%d}`, n))
		}
	}
	var ws []*running
	for range 2 {
		ws = append(ws, start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), MaxSessions: 3, PollInterval: 50 * time.Millisecond}))
	}
	streamtest.Eventually(t, 30*time.Second, "all requests run", func() bool { return p.total() == sessions*perSession })
	streamtest.Eventually(t, 10*time.Second, "all requests acknowledged", func() bool { return waiting(t, topo) == 0 })

	want := make([]int, perSession)
	for n := range want {
		want[n] = n
	}
	owners := map[string]bool{}
	for i := range sessions {
		s := sessionName(i)
		if got := p.ran(s); !slices.Equal(got, want) {
			t.Errorf("%s ran %v, want %v", s, got, want)
		}
		var ids []string
		for _, ev := range history(t, topo, s) {
			switch ev.Type {
			case schema.TypeCall:
				ids = append(ids, ev.Call.RequestID)
			case schema.TypeFenced:
				owners[ev.Fence.Owner] = true
			}
		}
		for n, id := range ids {
			if id != fmt.Sprintf("r-%d-%d", i, n) {
				t.Errorf("%s: tool.call %d has request %s", s, n, id)
			}
		}
		if len(ids) != perSession {
			t.Errorf("%s: %d tool.calls, want %d", s, len(ids), perSession)
		}
	}
	for _, r := range ws {
		if !owners[r.w.Owner()] {
			t.Errorf("worker %s owned no session (owners %v)", r.w.Owner(), owners)
		}
	}
}

// A request published again with the same request_id, and one whose
// tool.call an earlier owner already recorded, are acknowledged and never
// run.
func TestRequestIDRunsAtMostOnce(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	p := newProbe()
	const s = "dup"

	// An earlier owner recorded r-old and crashed before acknowledging it.
	lease, err := topo.Leases().AcquireLease(ctx, s, "earlier")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := topo.Logs().Fence(ctx, s, "earlier", lease.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(worker.Config{Session: s, Log: lg, Registry: registry(t, p.tools()...), Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CallWithOptions(ctx, "echo", json.RawMessage(`{"n":100}`), worker.CallOptions{RequestID: "r-old"}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	publish(t, topo, s, "r-old", "echo", `{"n":100}`)
	publish(t, topo, s, "r-1", "echo", `{"n":1}`)

	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "r-1 recorded", func() bool { return results(t, topo, s) == 2 })
	publish(t, topo, s, "r-1", "echo", `{"n":1}`)
	publish(t, topo, s, "r-2", "echo", `{"n":2}`)
	streamtest.Eventually(t, 10*time.Second, "r-2 recorded", func() bool { return results(t, topo, s) == 3 })
	streamtest.Eventually(t, 10*time.Second, "requests acknowledged", func() bool { return waiting(t, topo) == 0 })

	if got := p.ran(s); !slices.Equal(got, []int{100, 1, 2}) {
		t.Fatalf("bodies ran %v, want [100 1 2] (r-old by the earlier owner only, r-1 once)", got)
	}
	var ids []string
	for _, c := range calls(t, topo, s) {
		ids = append(ids, c.RequestID)
	}
	if !slices.Equal(ids, []string{"r-old", "r-1", "r-2"}) {
		t.Fatalf("tool.calls for %v", ids)
	}
}

// A request is acknowledged once its tool.call is recorded, before the
// call goes on: admission sees its tool.call on the log, and the request
// leaves the work queue while admission still holds the call (the
// acknowledgement is not waited for: it leaves the queue in the time a
// message takes, never at the call's end).
func TestAckOnceToolCallIsRecorded(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	atPermission := make(chan int, 1)
	perm := worker.HookFunc(func(ctx context.Context, a worker.Admission) error {
		atPermission <- len(calls(t, topo, a.Session))
		streamtest.Eventually(t, 5*time.Second, "the request acknowledged while admission holds its call", func() bool { return waiting(t, topo) == 0 })
		return nil
	})
	publish(t, topo, "ack", "r-1", "echo", `{"n":1}`)
	if waiting(t, topo) != 1 {
		t.Fatal("request not stored")
	}
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), Runtime: worker.Config{Permission: perm}, PollInterval: 50 * time.Millisecond})
	select {
	case got := <-atPermission:
		if got != 1 {
			t.Fatalf("at admission: %d tool.calls recorded, want 1", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("request never admitted")
	}
	streamtest.Eventually(t, 10*time.Second, "the call done", func() bool { return slices.Equal(p.ran("ack"), []int{1}) })
}

// Requests that cannot become calls are terminated without touching the
// log; the session's next request still runs.
func TestInvalidRequestsTerminated(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	const s = "bad"
	publishRaw(t, topo, s, []byte(`not json`))
	publishRaw(t, topo, s, []byte(`{"v":1,"session":"bad","tool":"echo","arguments":{"n":1}}`))                      // no request_id
	publishRaw(t, topo, s, []byte(`{"v":1,"request_id":"r-x","session":"other","tool":"echo","arguments":{"n":1}}`)) // wrong session
	publishRaw(t, topo, s, []byte(`{"v":9,"request_id":"r-v","session":"bad","tool":"echo","arguments":{"n":1}}`))   // unknown version
	publish(t, topo, s, "r-unknown", "no.such.tool", `{}`)
	publish(t, topo, s, "r-ok", "echo", `{"n":7}`)
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "r-ok recorded", func() bool { return results(t, topo, s) == 1 })
	streamtest.Eventually(t, 10*time.Second, "queue empty", func() bool { return waiting(t, topo) == 0 })
	cs := calls(t, topo, s)
	if len(cs) != 1 || cs[0].RequestID != "r-ok" || !slices.Equal(p.ran(s), []int{7}) {
		t.Fatalf("calls %+v, ran %v", cs, p.ran(s))
	}
}

// A worker whose lease is taken away cancels the running body and appends
// nothing after the new owner's fence.
func TestLeaseLossStopsSession(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	p := newProbe()
	const s = "steal"
	publish(t, topo, s, "r-1", "block", `{}`)
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	select {
	case <-p.started:
	case <-time.After(10 * time.Second):
		t.Fatal("body never started")
	}
	// Take the partition's lease away from under the worker and fence
	// the log at the thief's epoch.
	part := topo.Names().PartitionOf(s)
	if err := topo.LeaseBucket.Delete(ctx, "partition."+strconv.Itoa(part)); err != nil {
		t.Fatal(err)
	}
	ph, err := topo.Leases().AcquirePartition(ctx, part, "thief", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Logs().Fence(ctx, s, "thief", ph.Epoch()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("body ended with %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("body not cancelled after the lease was lost")
	}
	streamtest.Eventually(t, 10*time.Second, "session dropped", func() bool { return !slices.Contains(r.w.Owned(), s) })
	h := history(t, topo, s)
	last := h[len(h)-1]
	if last.Type != schema.TypeFenced || last.Fence.Owner != "thief" {
		t.Fatalf("last event %+v, want the thief's fence (the worker must not append after losing the lease)", last)
	}
	// The thief's lease is intact: the worker did not release or renew it.
	if lv, ok, err := topo.Leases().PartitionHolder(ctx, part); err != nil || !ok || lv.Owner != "thief" {
		t.Fatalf("lease %+v %v %v, want the thief's", lv, ok, err)
	}
}

// A worker fenced by a newer writer stops, leaves the request it could not
// record for redelivery, and (once its lease has lapsed) the session is
// taken again at a higher epoch and the request runs exactly once.
func TestFencedWorkerStopsAndRequestRunsOnce(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	p := newProbe()
	const s = "fenced"
	publish(t, topo, s, "r-1", "echo", `{"n":1}`)
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "r-1 recorded", func() bool { return results(t, topo, s) == 1 })
	high, err := topo.Logs().HighestEpoch(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Logs().Fence(ctx, s, "rogue", high+5); err != nil {
		t.Fatal(err)
	}
	publish(t, topo, s, "r-2", "echo", `{"n":2}`)
	streamtest.Eventually(t, 15*time.Second, "r-2 recorded", func() bool { return results(t, topo, s) == 2 })
	if got := p.ran(s); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("ran %v, want [1 2]", got)
	}
	var epochs []uint64
	for _, ev := range history(t, topo, s) {
		if ev.Type == schema.TypeCall && ev.Call.RequestID == "r-2" {
			epochs = append(epochs, ev.Epoch)
		}
	}
	if len(epochs) != 1 || epochs[0] <= high+5 {
		t.Fatalf("r-2 recorded at epochs %v, want once above %d", epochs, high+5)
	}
}

// Cancelling Run drains: the running body finishes and is recorded, no new
// request starts, and the lease and request consumer are given back.
func TestDrainFinishesBodiesThenReleases(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	p := newProbe()
	const s = "drain"
	publish(t, topo, s, "r-1", "block", `{}`)
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond})
	select {
	case <-p.started:
	case <-time.After(10 * time.Second):
		t.Fatal("body never started")
	}
	r.cancel()
	publish(t, topo, s, "r-2", "echo", `{"n":2}`)
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) while a body was running", err)
	default:
	}
	close(p.gate)
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
		r.done <- nil // for the cleanup's stop
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the body finished")
	}
	h := history(t, topo, s)
	last := h[len(h)-1]
	if last.Type != schema.TypeResult || last.Result.Status != schema.StatusOK {
		t.Fatalf("last event %+v, want the body's ok result", last)
	}
	if len(calls(t, topo, s)) != 1 || len(p.ran(s)) != 0 {
		t.Fatal("a request started during the drain")
	}
	if waiting(t, topo) != 1 {
		t.Fatal("r-2 should still be waiting")
	}
	if _, ok, err := topo.Leases().PartitionHolder(ctx, topo.Names().PartitionOf(s)); err != nil || ok {
		t.Fatalf("partition lease still held after drain (%v)", err)
	}
	if _, err := topo.Requests.Consumer(ctx, topo.Names().RequestConsumerName(topo.Names().PartitionOf(s))); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("request consumer after drain: %v, want not found", err)
	}
}

// A body that outlives DrainTimeout is cancelled and recorded as cancelled.
func TestDrainTimeoutCancelsBodies(t *testing.T) {
	topo := setup(t)
	p := newProbe()
	const s = "slowdrain"
	publish(t, topo, s, "r-1", "block", `{}`)
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 50 * time.Millisecond, DrainTimeout: 100 * time.Millisecond})
	<-p.started
	r.stop(t)
	r.done = make(chan error, 1)
	r.done <- nil
	h := history(t, topo, s)
	last := h[len(h)-1]
	if last.Type != schema.TypeResult || last.Result.Status != schema.StatusCancelled {
		t.Fatalf("last event %+v, want a cancelled result", last)
	}
}

// A retry plan published on jw.plans.<session> is executed once by the
// worker; the same plan published again changes nothing.
func TestPlanExecutedOnce(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	const s = "plan"
	tl.FailAfterWrite(1)
	publish(t, topo, s, "r-1", tools.OrdersCreate, `{"sku":"A-1","qty":2}`)
	start(t, toolworker.Config{Topology: topo, Registry: registry(t, tl.List()...), PollInterval: 50 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "first attempt recorded", func() bool { return results(t, topo, s) == 1 })
	first := calls(t, topo, s)[0]

	// The host prepares a plan (the session is given back when idle, so
	// the history is confirmed once the lease is free).
	streamtest.Eventually(t, 10*time.Second, "session given back", func() bool {
		_, ok, err := topo.Leases().LeaseHolder(ctx, s)
		return err == nil && !ok
	})
	plan, err := recovery.PrepareRetry(schema.Events(history(t, topo, s)), first.CallID, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan = signPlan(t, plan)
	if _, err := stream.NewPlans(topo.PlanBucket).Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(plan)
	if _, err := topo.JS.Publish(ctx, topo.Names().PlansSubject(s), pb); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 10*time.Second, "retry recorded", func() bool { return results(t, topo, s) == 2 })
	// Published again: delivered, refused as consumed, nothing recorded.
	if _, err := topo.JS.Publish(ctx, topo.Names().PlansSubject(s), pb); err != nil {
		t.Fatal(err)
	}
	cons, err := topo.PlanLog.Consumer(ctx, topo.Names().PlanConsumerName(topo.Names().PartitionOf(s)))
	if err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 10*time.Second, "plans handled", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Stream >= 2
	})
	cs := calls(t, topo, s)
	if len(cs) != 2 || cs[1].Operation.Retry == nil || cs[1].Operation.Retry.PlanID != plan.PlanID || cs[1].Operation.Key != first.Operation.Key {
		t.Fatalf("calls %+v", cs)
	}
	orders, err := tl.Orders(ctx)
	if err != nil || len(orders) != 1 {
		t.Fatalf("orders %+v %v, want exactly one", orders, err)
	}
	rec, err := stream.NewPlans(topo.PlanBucket).Get(ctx, plan.PlanID)
	if err != nil || rec.State != stream.PlanConsumed || rec.ConsumedBy != cs[1].CallID {
		t.Fatalf("plan record %+v %v", rec, err)
	}
	// The count is written off the call path, at the latest when the
	// idle session leaves the worker's memory (IdleTimeout).
	streamtest.Eventually(t, 10*time.Second, "tool_calls 2", func() bool {
		u, err := stream.NewBudget(topo.Budget).Get(ctx, s, first.Operation.Task)
		return err == nil && u.ToolCalls == 2
	})
}

// Delay slows bodies without changing what they do.
func TestDelayWrap(t *testing.T) {
	p := newProbe()
	echo := p.tools()[0]
	slow := toolworker.Delay{Before: 20 * time.Millisecond, After: 20 * time.Millisecond}.Wrap(echo)[0]
	t0 := time.Now()
	out, err := slow.Body(context.Background(), worker.BodyRequest{Session: "x", Arguments: json.RawMessage(`{"n":3}`)})
	if err != nil || string(out) != `{"n":3}` || time.Since(t0) < 40*time.Millisecond || !slices.Equal(p.ran("x"), []int{3}) {
		t.Fatalf("out %s err %v ran %v", out, err, p.ran("x"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := slow.Body(ctx, worker.BodyRequest{Session: "y", Arguments: json.RawMessage(`{"n":4}`)}); !errors.Is(err, context.Canceled) || len(p.ran("y")) != 0 {
		t.Fatalf("cancelled before: err %v ran %v", err, p.ran("y"))
	}
	if slow.Metadata != echo.Metadata {
		t.Fatal("metadata changed")
	}
}

// A session whose history cannot be loaded is not taken, and the worker
// backs off: every attempt appends a session.fenced event, so it must not
// retry on every poll.
func TestUnloadableSessionBacksOff(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	p := newProbe()
	const s = "corrupt"
	if _, err := topo.JS.Publish(ctx, topo.Names().EventsSubject(s), []byte(`not an event`)); err != nil {
		t.Fatal(err)
	}
	publish(t, topo, s, "r-1", "echo", `{"n":1}`)
	r := start(t, toolworker.Config{Topology: topo, Registry: registry(t, p.tools()...), PollInterval: 20 * time.Millisecond})
	fences := func() int {
		n := 0
		m, err := topo.Events.Info(ctx, jetstream.WithSubjectFilter(topo.Names().EventsSubject(s)))
		if err == nil {
			n = int(m.State.Msgs) - 1
		}
		return n
	}
	// The log can never record a call: the request is answered so
	// (corrupt_history on jw.answers.<session>), once, and nothing runs.
	var a schema.Answer
	streamtest.Eventually(t, 10*time.Second, "the request answered", func() bool {
		var ok bool
		a, ok, _ = topo.Answers().FindAnswer(ctx, s, "r-1")
		return ok
	})
	if a.Code != schema.CodeCorruptHistory {
		t.Fatalf("answer %+v, want corrupt_history", a)
	}
	time.Sleep(500 * time.Millisecond) // ~25 polls
	if n := fences(); n > 1 {
		t.Fatalf("%d session.fenced events, want at most 1", n)
	}
	if waiting(t, topo) != 0 || p.total() != 0 {
		t.Fatalf("waiting %d, ran %d: the request must be answered and nothing run", waiting(t, topo), p.total())
	}
	_ = r
}

// A plan for a session another worker owns is handed back until the owner
// gets it: it runs once, in the owner's epoch.
func TestPlanRunsOnTheOwner(t *testing.T) {
	topo := setup(t)
	ctx := context.Background()
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	const s = "owned"
	tl.FailAfterWrite(1)
	publish(t, topo, s, "r-1", tools.OrdersCreate, `{"sku":"B-2","qty":1}`)
	a := start(t, toolworker.Config{Topology: topo, Registry: registry(t, tl.List()...), Owner: "tw-a", PollInterval: 50 * time.Millisecond, PlanRetryDelay: 20 * time.Millisecond})
	streamtest.Eventually(t, 10*time.Second, "first attempt recorded", func() bool { return results(t, topo, s) == 1 })
	if !slices.Contains(a.w.Owned(), s) {
		t.Fatalf("worker A owns %v, want %s", a.w.Owned(), s)
	}
	b := start(t, toolworker.Config{Topology: topo, Registry: registry(t, tl.List()...), Owner: "tw-b", PollInterval: 50 * time.Millisecond, PlanRetryDelay: 20 * time.Millisecond})

	first := calls(t, topo, s)[0]
	plan, err := recovery.PrepareRetry(schema.Events(history(t, topo, s)), first.CallID, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan = signPlan(t, plan)
	if _, err := stream.NewPlans(topo.PlanBucket).Issue(ctx, plan); err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(plan)
	if _, err := topo.JS.Publish(ctx, topo.Names().PlansSubject(s), pb); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, 10*time.Second, "retry recorded", func() bool { return results(t, topo, s) == 2 })
	h := history(t, topo, s)
	var retryEpoch, fenceEpochA uint64
	for _, ev := range h {
		if ev.Type == schema.TypeFenced && ev.Fence.Owner == "tw-a" {
			fenceEpochA = ev.Epoch
		}
		if ev.Type == schema.TypeCall && ev.Call.Operation.Retry != nil {
			retryEpoch = ev.Epoch
		}
	}
	if retryEpoch == 0 || retryEpoch != fenceEpochA {
		t.Fatalf("retry at epoch %d, worker A owns epoch %d: the plan must run on the owner", retryEpoch, fenceEpochA)
	}
	if slices.Contains(b.w.Owned(), s) {
		t.Fatal("worker B took a session worker A owns")
	}
	if orders, err := tl.Orders(ctx); err != nil || len(orders) != 1 {
		t.Fatalf("orders %v %v, want 1", orders, err)
	}
}
