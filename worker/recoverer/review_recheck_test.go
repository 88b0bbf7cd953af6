package recoverer

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestReviewCheckedAgainAfterAFailedRead: a trusted completed review
// whose check cannot read the session's log (JetStream unreachable for a
// moment) is not acknowledged as rejected: it is delivered again and, once
// the log can be read, accepted, and its call no longer awaits review.
// Before, the check's read error counted as a rejection, the review was
// acknowledged, and the call stayed awaiting review until a restart.
func TestReviewCheckedAgainAfterAFailedRead(t *testing.T) {
	const ttl = time.Second
	e := setup(t, ttl)
	as := e.assessments()
	r := e.recoverer("a")
	var failures atomic.Int32
	r.reviews.load = func(ctx context.Context, session string) ([]schema.Event, error) {
		if failures.Add(1) <= 2 {
			return nil, errors.Join(errors.New("injected: JetStream unreachable"), nats.ErrTimeout)
		}
		return r.t.Logs().Load(ctx, session)
	}
	e.run(r)
	started(t, r)

	w := e.writer("s-rc", "w-rc")
	w.renew(t, ttl/4)
	w.call("pay-1", "payments.charge", effect.NonIdempotent, "k-1")
	w.started("pay-1")
	w.result("pay-1", schema.StatusFailed, "")
	as.wait(t, "s-rc", "pay-1", 5*time.Second)
	streamtest.Eventually(t, 5*time.Second, "pay-1 awaits review", func() bool {
		return slices.Contains(keysOf(statusView(t, r).AwaitingReview), "s-rc/pay-1")
	})

	e.publishReview("s-rc", review(t, e.reviewer, "s-rc", "pay-1", schema.VerdictCompleted))
	streamtest.Eventually(t, 15*time.Second, "the completed review settles pay-1 after the failed reads", func() bool {
		return !slices.Contains(keysOf(statusView(t, r).AwaitingReview), "s-rc/pay-1")
	})
	if n := failures.Load(); n < 3 {
		t.Fatalf("the check read the log %d times, want the 2 failures and a success", n)
	}
}
