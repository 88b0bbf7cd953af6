package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
)

// personReview is a payment's review by a person, when the probe could
// not decide: the reviewer checks the ledger and signs what it shows.
func (s *story) personReview(ctx context.Context, session, callID string) (schema.Verdict, error) {
	kp, pub := s.reviewer, s.reviewerPub
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
	rv, err := recovery.SignReview(kp, schema.Review{V: schema.Version, Session: session, CallID: callID,
		Operator: "demo-reviewer@ops", Evidence: evidence, Verdict: verdict, At: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(rv)
	reviewer, err := jetstream.New(s.roles[access.RoleReviewer])
	if err != nil {
		return "", err
	}
	if _, err := reviewer.Publish(ctx, s.topo.Names().ReviewsSubject(session), b); err != nil {
		return "", fmt.Errorf("publish review: %w", err)
	}
	s.say("review", "demo-reviewer@ops checks the ledger: %s\nsigns verdict %s with %s..., published on %s", evidence, verdict, pub[:12], s.topo.Names().ReviewsSubject(session))

	return verdict, nil
}
