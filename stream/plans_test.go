package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// kvForPlanTest starts an embedded JetStream server for one test and returns
// a fresh KV bucket on it.
func kvForPlanTest(t *testing.T, bucket string) jetstream.KeyValue {
	t.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), Port: -1, Host: "127.0.0.1", NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func testPlan(id string) schema.Plan {
	return schema.Plan{
		V: 1, PlanID: id, Session: "s-1", Task: "t-1", Tool: "orders.create",
		Arguments: json.RawMessage(`{"sku":"A","qty":1}`), ArgsDigest: "sha256:abc",
		Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"},
		Key:      "op-1", PriorCallID: "c-1", PriorSeq: 3, Basis: schema.BasisUncertainSafe,
		IssuedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
	}
}

func TestPlansIssueGetConsume(t *testing.T) {
	ctx := context.Background()
	plans := stream.NewPlans(kvForPlanTest(t, "jw_plans"))

	if _, err := plans.Get(ctx, "p-missing"); !errors.Is(err, stream.ErrPlanNotIssued) {
		t.Fatalf("Get missing: %v, want ErrPlanNotIssued", err)
	}
	p := testPlan("p-1")
	rec, err := plans.Issue(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != stream.PlanIssued || rec.Revision == 0 {
		t.Fatalf("issued record %+v", rec)
	}
	// Issuing the same plan again is deduplicated.
	again, err := plans.Issue(ctx, p)
	if err != nil || again.Revision != rec.Revision {
		t.Fatalf("re-issue: %+v, %v", again, err)
	}
	// A different plan under the same id conflicts.
	other := p
	other.Key = "op-2"
	if _, err := plans.Issue(ctx, other); !errors.Is(err, stream.ErrPlanConflict) {
		t.Fatalf("conflicting issue: %v", err)
	}
	got, err := plans.Get(ctx, "p-1")
	if err != nil || !stream.SamePlan(got.Plan, p) || got.State != stream.PlanIssued {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	done, err := plans.Consume(ctx, got, "c-2", 1)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != stream.PlanConsumed || done.ConsumedBy != "c-2" {
		t.Fatalf("consumed record %+v", done)
	}
	// The stale record (still saying issued) cannot consume it again.
	if _, err := plans.Consume(ctx, got, "c-3", 1); !errors.Is(err, stream.ErrPlanConsumed) {
		t.Fatalf("second consume: %v, want ErrPlanConsumed", err)
	}
	fresh, _ := plans.Get(ctx, "p-1")
	if _, err := plans.Consume(ctx, fresh, "c-4", 1); !errors.Is(err, stream.ErrPlanConsumed) {
		t.Fatalf("consume consumed: %v", err)
	}
	// Re-issuing a consumed plan does not revive it.
	re, err := plans.Issue(ctx, p)
	if err != nil || re.State != stream.PlanConsumed {
		t.Fatalf("re-issue consumed: %+v, %v", re, err)
	}
}

func TestPlansConsumeRace(t *testing.T) {
	ctx := context.Background()
	plans := stream.NewPlans(kvForPlanTest(t, "jw_plans"))
	if _, err := plans.Issue(ctx, testPlan("p-race")); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			rec, err := plans.Get(ctx, "p-race")
			if err == nil {
				_, err = plans.Consume(ctx, rec, "c-"+string(rune('a'+i)), 1)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, stream.ErrPlanConsumed):
			t.Errorf("unexpected error %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d consumers won, want exactly 1", wins)
	}
}
