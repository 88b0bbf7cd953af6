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
