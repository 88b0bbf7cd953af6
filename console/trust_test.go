package console

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestCheckSigned: the console relays only what a person signed: an
// unsigned review, a forged signature, a review of another call, a blank
// operator, a signer outside the trusted reviewers are refused before
// anything is published, with invalid_review; a review by a trusted key
// passes. The same for answers to approvals (invalid_approval).
func TestCheckSigned(t *testing.T) {
	_, nc, _ := streamtest.Start(t)
	alice, bob, mallory := testKey(t), testKey(t), testKey(t)
	apub, _ := alice.PublicKey()
	bpub, _ := bob.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(apub, bpub)
	c, err := New(Config{Reviewer: nc, Host: nc, TrustedReviewers: trusted, ReviewerNames: recovery.KeyNames{apub: "alice"},
		TrustedApprovers: trusted, ApproverNames: recovery.KeyNames{bpub: "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Format(time.RFC3339)
	review := schema.Review{V: 1, Session: "s-1", CallID: "c-1", Operator: "alice@ops", Evidence: "ledger", Verdict: schema.VerdictNotExecuted, At: at}
	signed := func(r schema.Review, by string) []byte {
		t.Helper()
		kp := map[string]nkeys.KeyPair{"alice": alice, "bob": bob, "mallory": mallory}[by]
		rv, err := recovery.SignReview(kp, r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rv)
		return b
	}
	if _, err := c.checkReview("s-1", "c-1", signed(review, "alice")); err != nil {
		t.Fatalf("alice's review: %v", err)
	}
	if _, err := c.checkReview("s-1", "c-1", signed(review, "bob")); err != nil {
		t.Fatalf("bob's review: %v", err)
	}
	if c.reviewerName(apub) != "alice" || c.reviewerName(bpub) != "trusted key (no name)" {
		t.Fatalf("names: %q %q", c.reviewerName(apub), c.reviewerName(bpub))
	}
	unsigned, _ := json.Marshal(review)
	var forged schema.Review
	_ = json.Unmarshal(signed(review, "alice"), &forged)
	forged.Verdict = schema.VerdictCompleted
	forgedB, _ := json.Marshal(forged)
	other := review
	other.CallID = "c-2"
	blank := review
	blank.Operator = " "
	for name, tc := range map[string]struct {
		b     []byte
		cause error
	}{
		"unsigned":        {unsigned, recovery.ErrUnsignedReview},
		"forged":          {forgedB, recovery.ErrBadSignature},
		"another call":    {signed(other, "alice"), nil},
		"blank operator":  {signed(blank, "alice"), nil},
		"untrusted":       {signed(review, "mallory"), nil},
		"not json":        {[]byte("not json"), nil},
		"console's claim": {[]byte(`{"v":1,"session":"s-1","call_id":"c-1","operator":"x","evidence":"y","verdict":"not_executed","signer":"` + apub + `","sig":"AAAA"}`), recovery.ErrBadSignature},
	} {
		_, err := c.checkReview("s-1", "c-1", tc.b)
		if schema.CodeOf(err) != schema.CodeInvalidReview {
			t.Errorf("%s: %v, want invalid_review", name, err)
		}
		if tc.cause != nil && !errors.Is(err, tc.cause) {
			t.Errorf("%s: %v, want %v", name, err, tc.cause)
		}
	}
	if _, err := c.checkReview("s-1", "c-1", signed(review, "mallory")); err == nil || !strings.Contains(err.Error(), "not a trusted reviewer key") {
		t.Errorf("untrusted: %v", err)
	}

	approval := schema.Approval{V: 1, Session: "s-1", CallID: "c-1", Decision: schema.Approved, Approver: "bob", Reason: "invoice", At: at}
	signA := func(a schema.Approval, kp nkeys.KeyPair) []byte {
		t.Helper()
		sa, err := recovery.SignApproval(kp, a)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(sa)
		return b
	}
	if _, err := c.checkApproval("s-1", "c-1", signA(approval, bob)); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	unsignedA, _ := json.Marshal(approval)
	otherA := approval
	otherA.CallID = "c-2"
	for name, b := range map[string][]byte{
		"unsigned":     unsignedA,
		"another call": signA(otherA, bob),
		"untrusted":    signA(approval, mallory),
	} {
		if _, err := c.checkApproval("s-1", "c-1", b); schema.CodeOf(err) != schema.CodeInvalidApproval {
			t.Errorf("approval %s: %v, want invalid_approval", name, err)
		}
	}
}
