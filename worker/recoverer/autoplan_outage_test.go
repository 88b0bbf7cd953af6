package recoverer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// assessedHook calls fn for every published assessment.
type assessedHook struct{ fn func(schema.Assessment) }

func (h assessedHook) Assessed(a schema.Assessment)                         { h.fn(a) }
func (h assessedHook) TookOver(string, []schema.Event, []schema.Assessment) {}

// logHook calls fn with every log line.
type logHook struct{ fn func(string) }

func (h logHook) Write(b []byte) (int, error) { h.fn(string(b)); return len(b), nil }

// TestAutoPlanSurvivesATransientOutage: with AutoPlan on, "a plan for
// every retry_allowed assessment the recoverer publishes". The recovery
// worker's connection to JetStream is held (a cut-off node, a long
// election) from the moment it published a retry_allowed assessment, until
// its auto-planner has failed to issue the plan; then the connection
// works again. The plan must still be issued: the auto-planner drops a
// call whose prepare failed for a transient reason, it is in no durable
// queue, and nothing issues its plan afterwards (nor after a restart).
func TestAutoPlanSurvivesATransientOutage(t *testing.T) {
	e := setup(t, 0)
	srvURL := e.nc.ConnectedUrl()
	px := streamtest.NewFreezeProxy(t, srvURL)
	nc1, err := nats.Connect(px.URL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc1.Close)
	js1, _ := jetstream.New(nc1)
	ctx := context.Background()
	topo1, err := stream.OpenTopology(ctx, js1, stream.TopologyConfig{LeaseMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var once, thawOnce sync.Once
	thaw := func() { thawOnce.Do(px.Thaw) }
	tw := zerolog.NewTestWriter(t)
	logger := zerolog.New(zerolog.MultiLevelWriter(tw, logHook{func(line string) {
		if strings.Contains(line, "auto-plan") && strings.Contains(line, `"error"`) {
			thaw() // the auto-planner gave up on it: the outage ends
		}
	}})).Level(zerolog.InfoLevel)
	r, err := New(Config{Topology: topo1, Name: "a", PlannerKey: e.planner, AutoPlan: true, DisableService: true, Logger: logger,
		Observer: assessedHook{func(a schema.Assessment) {
			if a.CallID == "safe" && a.Decision == schema.DecisionRetryAllowed {
				once.Do(func() {
					px.Freeze()
					// Whatever the auto-planner does, the outage ends
					// after 30 s.
					time.AfterFunc(30*time.Second, thaw)
				})
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	<-r.Ready()
	w := e.writer("s-auto", "w1")
	w.call("safe", "orders.create", effect.Idempotent, "k-1")
	w.started("safe")
	w.result("safe", schema.StatusFailed, "")

	streamtest.Eventually(t, 60*time.Second, "the retry_allowed call's plan issued once JetStream answers again", func() bool {
		return len(e.planMsgs()) == 1
	})
}

// TestAutoPlanSurvivesARestart: with AutoPlan on, the recovery worker
// publishes a retry_allowed assessment (its events acknowledged) while
// jw_plans cannot take a write (its stream has lost its subjects, as a
// bucket whose leader is gone takes none), so the auto-planner cannot
// issue the plan yet; the recovery worker is stopped then (a crash, a
// deploy), jw_plans works again, and a recovery worker of the same name
// and configuration starts. It must issue the plan: nothing else will (an
// explicit prepare aside) — the retry_allowed call is on no awaiting list.
func TestAutoPlanSurvivesARestart(t *testing.T) {
	e := setup(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	bg := context.Background()
	plansStream, err := e.topo.JS.Stream(bg, "KV_"+e.topo.Prefix+"_plans")
	if err != nil {
		t.Fatal(err)
	}
	plansCfg := plansStream.CachedInfo().Config
	broken := plansCfg
	broken.Subjects = []string{"rtlive.nowhere.>"}
	var once sync.Once
	var transientSeen sync.Once
	failed := make(chan struct{})
	logger := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logHook{func(line string) {
		if strings.Contains(line, "auto-plan") && strings.Contains(line, "safe") && strings.Contains(line, `"error"`) {
			transientSeen.Do(func() { close(failed) })
		}
	}})).Level(zerolog.InfoLevel)
	r, err := New(Config{Topology: e.topo, Name: "a", PlannerKey: e.planner, AutoPlan: true, DisableService: true, Logger: logger,
		Observer: assessedHook{func(a schema.Assessment) {
			if a.CallID == "safe" && a.Decision == schema.DecisionRetryAllowed {
				once.Do(func() {
					if _, err := e.topo.JS.UpdateStream(bg, broken); err != nil {
						t.Errorf("break jw_plans: %v", err)
					}
				})
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Ready()
	w := e.writer("s-auto", "w1")
	w.call("safe", "orders.create", effect.Idempotent, "k-1")
	w.started("safe")
	resultSeq := w.append(schema.Event{Type: schema.TypeResult, Result: &schema.Result{CallID: "safe", Status: schema.StatusFailed, Error: "test: failed"}})
	select {
	case <-failed:
	case <-time.After(60 * time.Second):
		t.Fatal("the auto-planner never failed to issue the plan")
	}
	streamtest.Eventually(t, 30*time.Second, "the call's events acknowledged", func() bool {
		c, err := e.topo.Events.Consumer(bg, r.consumerName("events"))
		if err != nil {
			return false
		}
		info, err := c.Info(bg)
		return err == nil && info.AckFloor.Stream >= resultSeq
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first recovery worker did not stop")
	}
	if _, err := e.topo.JS.UpdateStream(bg, plansCfg); err != nil {
		t.Fatal(err)
	}
	if n := len(e.planMsgs()); n != 0 {
		t.Fatalf("a plan was issued while jw_plans took no write: %d", n)
	}
	e.run(e.recoverer("a", func(c *Config) { c.AutoPlan = true; c.DisableService = true }))
	streamtest.Eventually(t, 30*time.Second, "the restarted recovery worker issued the retry_allowed call's plan", func() bool {
		return len(e.planMsgs()) == 1
	})
}
