package test

import (
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// planner is a recovery worker's plan-signing key for in-process tests: the
// runtimes and tool workers of a test trust it (planners), plans a test
// issues itself are signed with it (sign).
type planner struct {
	kp      nkeys.KeyPair
	trusted recovery.TrustedKeys
}

func newPlanner(t *testing.T) planner {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return planner{kp: kp, trusted: trusted}
}

func (p planner) sign(t *testing.T, plan schema.Plan) schema.Plan {
	t.Helper()
	s, err := recovery.SignPlan(p.kp, plan)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
