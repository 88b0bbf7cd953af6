package worker_test

import (
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// testPlannerSeed is the recovery worker key the tests sign plans with (a
// constant, so child processes of a test trust the same key).
const testPlannerSeed = "SUAIRGOZWR7KNGUNQ2NDG7E3CAGMZ3KWMZLJIRNCHGQHPCG3ZYQXMKWNAY"

// testPlanner returns the test planner key pair and the set that trusts it.
func testPlanner(t testing.TB) (nkeys.KeyPair, recovery.TrustedKeys) {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(testPlannerSeed))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return kp, trusted
}

// signed returns p signed by the test planner.
func signed(t testing.TB, p schema.Plan) schema.Plan {
	t.Helper()
	kp, _ := testPlanner(t)
	s, err := recovery.SignPlan(kp, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trustTestPlanner is a runtime Config change that trusts the test planner.
func trustedPlanners(t testing.TB) recovery.TrustedKeys {
	_, trusted := testPlanner(t)
	return trusted
}
