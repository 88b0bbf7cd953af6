package recoverer

import (
	"bytes"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestPlannerKeyCache: the planner key with its keys derived once signs
// exactly as the nkeys key pair does (same public key, same signature
// bytes, a plan that verifies under the planner's public key), and after
// Wipe it signs nothing; a key pair that is not a user key is left as it
// is, so SignPlan still refuses it.
func TestPlannerKeyCache(t *testing.T) {
	kp := newPlanner(t)
	cached := cachePlannerKey(kp)
	if _, ok := cached.(*plannerKey); !ok {
		t.Fatalf("cachePlannerKey(user key) = %T, want *plannerKey", cached)
	}
	pub, _ := kp.PublicKey()
	if got, err := cached.PublicKey(); err != nil || got != pub {
		t.Fatalf("PublicKey = %q %v, want %q", got, err, pub)
	}
	for _, msg := range [][]byte{nil, []byte("plan"), bytes.Repeat([]byte{0xff}, 4096)} {
		want, err := kp.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cached.Sign(msg)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Sign(%d bytes) differs from the key pair's", len(msg))
		}
		if err := kp.Verify(msg, got); err != nil {
			t.Fatalf("signature does not verify: %v", err)
		}
	}
	p := schema.Plan{V: schema.Version, PlanID: recovery.PlanID("s-1", "c-1"), Session: "s-1", PriorCallID: "c-1", Basis: schema.BasisNotStarted}
	signed, err := recovery.SignPlan(cached, p)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := recovery.SignPlan(kp, p)
	if err != nil || signed.Sig != direct.Sig || signed.Signer != direct.Signer {
		t.Fatalf("SignPlan through the cache %q/%q, directly %q/%q (%v)", signed.Signer, signed.Sig, direct.Signer, direct.Sig, err)
	}
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := recovery.VerifyPlan(signed, trusted); err != nil {
		t.Fatalf("plan signed through the cache: %v", err)
	}

	cached.Wipe()
	if _, err := cached.Sign([]byte("plan")); err == nil {
		t.Fatal("a wiped planner key still signs")
	}

	account, _ := nkeys.CreateAccount()
	if got := cachePlannerKey(account); got != account {
		t.Fatalf("cachePlannerKey(account key) = %T, want the key pair unchanged", got)
	}
	if _, err := recovery.SignPlan(cachePlannerKey(account), p); err == nil {
		t.Fatal("SignPlan with an account key succeeded")
	}
	if cachePlannerKey(nil) != nil {
		t.Fatal("cachePlannerKey(nil) is not nil")
	}
}

// TestVerifyStored: the cheaper check of a stored plan (verifyStored)
// accepts exactly what recovery.VerifyPlan accepts, on every path: a plan
// the planner key signed (re-signed and compared, or matched with the
// prepare's own plan), another trusted planner's plan (verified in full),
// and it refuses, like VerifyPlan, a plan changed after signing (with or
// without an own plan of the same signature at hand), a signature copied
// from another plan, an untrusted signer, a signer claiming the planner's
// key with another key's signature, an unsigned plan, and the planner's
// own plan once its key is not trusted.
func TestVerifyStored(t *testing.T) {
	kp := newPlanner(t)
	planner := cachePlannerKey(kp)
	pub, _ := kp.PublicKey()
	other := newPlanner(t)
	otherPub, _ := other.PublicKey()
	stranger := newPlanner(t)
	trusted, err := recovery.NewTrustedKeys(pub, otherPub)
	if err != nil {
		t.Fatal(err)
	}
	onlyOther, _ := recovery.NewTrustedKeys(otherPub)
	base := schema.Plan{V: schema.Version, PlanID: recovery.PlanID("s-1", "c-1"), Session: "s-1", Task: "t-1", Tool: "orders.create", PriorCallID: "c-1", PriorSeq: 1, Basis: schema.BasisUncertainSafe}
	sign := func(k nkeys.KeyPair, p schema.Plan) schema.Plan {
		t.Helper()
		s, err := recovery.SignPlan(k, p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine := sign(planner, base)
	second := base
	second.PriorSeq = 7
	mineSecond := sign(planner, second)
	changed := mine
	changed.Tool = "payments.charge"
	copied := mineSecond
	copied.Sig = mine.Sig
	claimed := sign(stranger, base)
	claimed.Signer = pub
	unsigned := base

	cases := []struct {
		name    string
		p       schema.Plan
		own     *schema.Plan
		trusted recovery.TrustedKeys
		ok      bool
	}{
		{"the planner's", mine, nil, trusted, true},
		{"the planner's, own plan at hand", mine, &mine, trusted, true},
		{"the planner's, another own plan at hand", mine, &mineSecond, trusted, true},
		{"another trusted planner's", sign(other, base), &mine, trusted, true},
		{"changed after signing", changed, nil, trusted, false},
		{"changed after signing, own plan at hand", changed, &mine, trusted, false},
		{"a signature copied from another plan", copied, &mine, trusted, false},
		{"an untrusted signer", sign(stranger, base), nil, trusted, false},
		{"the planner's key claimed, another key's signature", claimed, nil, trusted, false},
		{"unsigned", unsigned, nil, trusted, false},
		{"the planner's, its key not trusted", mine, &mine, onlyOther, false},
	}
	for _, c := range cases {
		want := recovery.VerifyPlan(c.p, c.trusted)
		got := verifyStored(planner, c.trusted, c.p, c.own)
		if (got == nil) != c.ok || (want == nil) != c.ok || schema.CodeOf(got) != schema.CodeOf(want) {
			t.Errorf("%s: verifyStored %v, VerifyPlan %v", c.name, got, want)
		}
	}
	// A planner key pair that is not cached checks in full.
	if err := verifyStored(kp, trusted, changed, &mine); err == nil {
		t.Error("an uncached planner accepted a changed plan")
	}
	if err := verifyStored(kp, trusted, mine, nil); err != nil {
		t.Errorf("an uncached planner refused its own plan: %v", err)
	}
}
