package prober_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/service"
)

// TestProbeUnfencedTimeout: a payment whose body outlives its timeout while
// its writer still holds the session is needs_review with no fence after
// it. The probe raises nothing then: a charge already there is found
// (completed), but none there is only evidence — and rightly, for the body
// still running charges after the probe looked.
func TestProbeUnfencedTimeout(t *testing.T) {
	for _, chargeFirst := range []bool{true, false} {
		name := map[bool]string{true: "charged before the timeout", false: "charges after the probe"}[chargeFirst]
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			e.startProber(nil)
			release := make(chan struct{})
			done := make(chan struct{})
			tool := e.tl.PaymentsChargeTool()
			charge := tool.Body
			tool.Timeout = 200 * time.Millisecond
			tool.Body = func(_ context.Context, req worker.BodyRequest) (json.RawMessage, error) {
				defer close(done)
				if chargeFirst {
					out, err := charge(context.Background(), req)
					<-release
					return out, err
				}
				<-release // ignores its deadline, like a body stuck in I/O
				return charge(context.Background(), req)
			}
			a, err := e.topo.Leases().TakeOver(e.ctx, session, "w-a", e.topo.Leases().SessionLeases())
			if err != nil {
				t.Fatal(err)
			}
			// The runtime answers the timeout as an error too.
			res, _ := e.runtime(a, tool).Call(e.ctx, "payments.charge", chargeArgs)
			if res.Status != schema.StatusTimeout {
				t.Fatalf("call: %+v, want a timeout", res)
			}
			c := e.deciding(res.CallID, "the probe's review is on record", func(c service.ReviewCheck) bool { return c.Review.Automated() })
			if chargeFirst {
				if c.Review.Verdict != schema.VerdictCompleted || !c.Decides {
					t.Fatalf("review %+v decides %v: want completed", c.Review, c.Decides)
				}
				close(release)
				<-done
				return
			}
			if c.Review.Verdict != schema.VerdictUncertain || c.Decides {
				t.Fatalf("review %+v decides %v: want evidence only (no fence was raised)", c.Review, c.Decides)
			}
			if _, err := e.rec.Prepare(e.ctx, session, res.CallID); schema.CodeOf(err) != schema.CodeNeedsReview {
				t.Fatalf("prepare: %v, want needs_review", err)
			}
			close(release)
			<-done
			if l, _ := e.tl.Ledger(e.ctx); len(l) != 1 {
				t.Fatalf("ledger %+v: the late charge landed, as a not_executed would have wrongly denied", l)
			}
		})
	}
}
