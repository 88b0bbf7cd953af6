package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/fence"
)

// TestZombieChargeRefused is the SIGSTOP (zombie writer) scenario in one
// process: a writer's payments.charge body is blocked (as a frozen process
// is) before its side effect while it loses its lease; a recoverer takes
// the session over and fences it; the reviewer raises the ledger's fence
// at the fence's epoch, finds no charge and may sign not_executed; the
// retry by a new writer charges; then the frozen body is released. Exactly
// one charge lands: the zombie's is refused by the ledger. The second case
// leaves the reviewer's raise out (the retry's own charge fences the
// ledger), and the third releases the zombie between the review and the
// retry, which only the reviewer's raise catches.
func TestZombieChargeRefused(t *testing.T) {
	for _, tc := range []struct {
		name            string
		raise           bool
		zombieFirst     bool // the zombie resumes before the retry
		wantZombieStale bool
	}{
		{name: "review raises, retry, zombie", raise: true, wantZombieStale: true},
		{name: "retry fences by charging, zombie", raise: false, wantZombieStale: true},
		{name: "review raises, zombie, retry", raise: true, zombieFirst: true, wantZombieStale: true},
	} {
		t.Run(tc.name, func(t *testing.T) { zombie(t, tc.raise, tc.zombieFirst) })
	}
}

func zombie(t *testing.T, raise, zombieFirst bool) {
	ctx := context.Background()
	_, _, topo := streamtest.StartWith(t, streamtest.Config{Topology: stream.TopologyConfig{LeaseTTL: time.Second}})
	tl, err := tools.New(ctx, tools.Config{JS: topo.JS})
	if err != nil {
		t.Fatal(err)
	}
	const session = "s-zombie"
	args := json.RawMessage(`{"account":"acct-1","amount_cents":500}`)

	entered, release := make(chan struct{}), make(chan struct{})
	bodyErr := make(chan error, 1)
	frozen := tl.PaymentsChargeTool()
	charge := frozen.Body
	frozen.Body = func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
		close(entered)
		<-release // frozen: no timer of its own runs, like SIGSTOP
		// Resumed with a context of its own: a process that wakes up does
		// not know its deadline passed.
		out, err := charge(context.Background(), req)
		bodyErr <- err
		return out, err
	}
	runtime := func(tk *stream.Takeover, tool worker.Tool) *worker.Runtime {
		reg, err := worker.NewRegistry(tool)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := worker.New(worker.Config{Session: session, Log: tk.Log, History: tk.History, Registry: reg,
			Plans: stream.NewPlans(topo.PlanBucket), Budget: stream.NewBudget(topo.Budget)})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}

	// The first writer starts the charge and freezes in its body.
	a, err := topo.Leases().TakeOver(ctx, session, "w-a", topo.Leases().SessionLeases())
	if err != nil {
		t.Fatal(err)
	}
	zr := runtime(a, frozen)
	zdone := make(chan error, 1)
	go func() { _, err := zr.Call(ctx, tools.PaymentsCharge, args); zdone <- err }()
	<-entered

	// Its lease goes (expired while it was frozen); a recoverer takes the
	// session over: session.fenced at a higher epoch.
	a.Hold.Lose(errors.New("test: frozen, the lease is not renewed"))
	var rec *stream.Takeover
	streamtest.Eventually(t, 10*time.Second, "the frozen writer's lease expires and a recoverer takes over", func() bool {
		rec, err = topo.Leases().TakeOver(ctx, session, "recoverer-t", topo.Leases().SessionLeases())
		if err != nil && !errors.Is(err, stream.ErrLeaseHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	fenceEpoch := rec.Hold.Epoch()
	if fenceEpoch <= a.Hold.Epoch() {
		t.Fatalf("fence epoch %d not above the writer's %d", fenceEpoch, a.Hold.Epoch())
	}
	if err := rec.Hold.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The reviewer: raise the ledger's fence at the fence's epoch, then
	// check. No charge: not_executed is true, and stays true.
	if raise {
		if err := tl.FenceLedger(ctx, session, fenceEpoch); err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := tl.Ledger(ctx); len(l) != 0 {
		t.Fatalf("ledger before the retry: %+v", l)
	}

	resume := func() {
		close(release)
		select {
		case err := <-bodyErr:
			if !errors.Is(err, fence.ErrStale) {
				t.Fatalf("zombie's charge: %v, want fence.ErrStale", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("zombie body did not finish")
		}
		if err := <-zdone; !errors.Is(err, schema.ErrFenced) && schema.CodeOf(err) != schema.CodeFenced {
			t.Fatalf("zombie's call: %v, want fenced", err)
		}
	}
	if zombieFirst {
		if !raise {
			t.Fatal("a zombie resuming before the retry is caught only by the reviewer's raise")
		}
		resume()
	}

	// The retry, by a new writer at a higher epoch.
	b, err := topo.Leases().TakeOver(ctx, session, "w-b", topo.Leases().SessionLeases())
	if err != nil {
		t.Fatal(err)
	}
	res, err := runtime(b, tl.PaymentsChargeTool()).Call(ctx, tools.PaymentsCharge, args)
	if err != nil || res.Status != schema.StatusOK {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if !zombieFirst {
		resume()
	}

	l, err := tl.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 1 || l[0].CallID != res.CallID || l[0].Epoch != b.Hold.Epoch() {
		t.Fatalf("ledger %+v: want exactly the retry's charge (call %s, epoch %d)", l, res.CallID, b.Hold.Epoch())
	}
}
