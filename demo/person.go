package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
)

// personReview is the payment's review by a person, when the probe could
// not decide: the reviewer checks the ledger and signs what it shows.
func (s *story) personReview(ctx context.Context, kp nkeys.KeyPair, pub, callID string) (schema.Verdict, error) {
	if _, err := s.prepare(ctx, PaymentSession, callID); schema.CodeOf(err) != schema.CodeNeedsReview {
		return "", fmt.Errorf("%w: prepare of the payment before a person's review: %v (want needs_review)", ErrStory, err)
	}
	s.say("host", "retry %s: refused, needs_review (a non-idempotent call that may have run)", callID)

	ledger, err := s.tools.Ledger(ctx)
	if err != nil {
		return "", err
	}
	verdict, evidence := schema.VerdictNotExecuted, fmt.Sprintf("ledger %s: no entry for call %s", "TOOLS_LEDGER", callID)
	for _, ch := range ledger {
		if ch.CallID == callID {
			verdict, evidence = schema.VerdictCompleted, fmt.Sprintf("ledger TOOLS_LEDGER seq %d: %d cents to %s by call %s", ch.Seq, ch.AmountCents, ch.Account, ch.CallID)
		}
	}
	rv, err := recovery.SignReview(kp, schema.Review{V: schema.Version, Session: PaymentSession, CallID: callID,
		Operator: "demo-reviewer@ops", Evidence: evidence, Verdict: verdict, At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(rv)
	reviewer, err := jetstream.New(s.roles[access.RoleReviewer])
	if err != nil {
		return "", err
	}
	if _, err := reviewer.Publish(ctx, s.topo.Names().ReviewsSubject(PaymentSession), b); err != nil {
		return "", fmt.Errorf("publish review: %w", err)
	}
	s.say("review", "demo-reviewer@ops checks the ledger: %s\nsigns verdict %s with %s..., published on %s", evidence, verdict, pub[:12], s.topo.Names().ReviewsSubject(PaymentSession))

	return verdict, nil
}
