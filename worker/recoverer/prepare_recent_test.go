package recoverer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// planMsgIDs returns the Msg-Ids of the messages on the session's plan
// subject, in stream order, and their sequences.
func (e *env) planMsgIDs(session string) (ids []string, seqs []uint64) {
	e.t.Helper()
	err := e.topo.Reader().ReadSubject(context.Background(), e.topo.PlanLog.CachedInfo().Config.Name, e.topo.Names().PlansStoredSubject(session), func(m *jetstream.RawStreamMsg) error {
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
		seqs = append(seqs, m.Sequence)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ids, seqs
}

// dropPlanMsgs acknowledges, through the plan consumer of the session's
// partition (created as a tool worker creates it when there is none),
// every plan message it delivers without using the plan — what a tool
// worker that refuses a plan does — and waits until its ack floor has
// reached the session's last plan message.
func (e *env) dropPlanMsgs(session string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := e.topo.Names().PartitionOf(session)
	cons, err := e.topo.PlanLog.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       e.topo.Names().PlanConsumerName(p),
		FilterSubject: e.topo.Names().PlansPartitionSubject(p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_, seqs := e.planMsgIDs(session)
	last := seqs[len(seqs)-1]
	for {
		floor, _, err := e.topo.Plans().PlanConsumerAckFloor(ctx, session)
		if err != nil {
			e.t.Fatal(err)
		}
		if floor >= last {
			return
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			e.t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestDeliverRecentIsEnsureDeliverable: the deliverability check of a
// plan created moments ago (deliverRecent: publications with the plan's
// Msg-Ids, their duplicates' sequences against the plan consumer's ack
// floor) gives exactly what the full check (ensureDeliverable: the plan's
// latest message against the floor) gives, and so does a prepare asking
// again, through each step: a creator that crashed before publishing
// (the plan is published, once), asked again (nothing new), a worker
// that acknowledged the plan without using it (published again once,
// with Msg-Id <plan_id>/again/<seq>, however many prepares race for it),
// asked again while that one is pending (nothing new), dropped again
// (a third message, again after the second), and a later plan of the
// same session published last on the subject (nothing new for the first).
func TestDeliverRecentIsEnsureDeliverable(t *testing.T) {
	for _, way := range []string{"recent", "full", "prepare"} {
		t.Run(way, func(t *testing.T) {
			ctx := context.Background()
			e := setup(t, 0)
			w := e.writer("s-d", "w1")
			for _, id := range []string{"c-1", "c-2"} {
				w.call(id, "orders.create", effect.Idempotent, "k-"+id)
				w.started(id)
				w.result(id, schema.StatusFailed, "")
			}
			crashing := e.recoverer("a")
			crashing.issuer.afterCreate = func(schema.Plan) error { return errCrash }
			if _, err := crashing.Prepare(ctx, "s-d", "c-1"); !errors.Is(err, errCrash) {
				t.Fatalf("prepare with the crash hook: %v", err)
			}
			r := e.recoverer("b")
			rec, err := stream.NewPlans(e.topo.PlanBucket).Get(ctx, recovery.PlanID("s-d", "c-1"))
			if err != nil {
				t.Fatal(err)
			}
			if !r.issuer.justCreated(rec) {
				t.Fatalf("a record stored just now is not justCreated: %+v", rec)
			}
			plan := rec.Plan
			deliver := func() {
				t.Helper()
				var err error
				switch way {
				case "recent":
					err = r.issuer.deliverRecent(ctx, plan)
				case "full":
					err = r.issuer.ensureDeliverable(ctx, plan)
				default:
					var p schema.Plan
					if p, err = r.Prepare(ctx, "s-d", "c-1"); err == nil && (p.PlanID != plan.PlanID || p.Sig != plan.Sig) {
						t.Fatalf("prepare returned %+v, want the stored plan", p)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want := func(step string, ids ...string) []uint64 {
				t.Helper()
				got, seqs := e.planMsgIDs("s-d")
				if fmt.Sprint(got) != fmt.Sprint(ids) {
					t.Fatalf("%s: plan messages %v, want %v", step, got, ids)
				}
				return seqs
			}

			deliver()
			seqs := want("after the crash", plan.PlanID)
			deliver()
			want("asked again", plan.PlanID)

			e.dropPlanMsgs("s-d")
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() { defer wg.Done(); deliver() }()
			}
			wg.Wait()
			again := stream.PlanAgainID(plan.PlanID, seqs[0])
			seqs = want("dropped, then asked by four at once", plan.PlanID, again)
			deliver()
			want("asked again while pending", plan.PlanID, again)

			e.dropPlanMsgs("s-d")
			deliver()
			third := stream.PlanAgainID(plan.PlanID, seqs[1])
			want("dropped again", plan.PlanID, again, third)

			p2, err := r.Prepare(ctx, "s-d", "c-2")
			if err != nil {
				t.Fatal(err)
			}
			deliver()
			want("another plan last on the subject", plan.PlanID, again, third, p2.PlanID)
		})
	}
}
