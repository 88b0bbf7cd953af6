package recoverer

import (
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// Config configures a Recoverer. Topology is required; every other field
// has a default. The lease TTL the recoverer takes sessions over with is the
// topology's (stream.TopologyConfig.LeaseTTL): it is one setting for every
// process of a deployment.
type Config struct {
	// Topology is the jingwei topology (streams, buckets, leases) on the
	// server. Required. Its JetStream context's connection also carries the
	// micro service, and must carry no other.
	Topology *stream.Topology
	// Logger receives the recoverer's log. The zero value logs nothing.
	Logger zerolog.Logger
	// TrustedReviewers are the nkey user public keys whose signed reviews
	// are accepted. Nil or empty trusts no one: every review is rejected and
	// uncertain calls of unknown or non-idempotent tools can never be
	// planned.
	TrustedReviewers recovery.TrustedKeys
	// TrustedProbers are the nkey user public keys of the probers whose
	// signed automated reviews (schema.Review.Probe set) are accepted. A
	// person's review is checked against TrustedReviewers only and a
	// probe's against TrustedProbers only. Nil or empty trusts no probe.
	TrustedProbers recovery.TrustedKeys
	// PlannerKey is the nkey user key pair the recoverer signs its plans
	// with (recovery.SignPlan); tool workers run only plans whose signature
	// verifies against their trusted planner keys. Required.
	PlannerKey nkeys.KeyPair
	// TrustedPlanners are the planner public keys whose signatures the
	// recoverer accepts on the retries already in a history: before it
	// plans a call, every retry in the call's chain must carry a plan
	// signed by one of them (recovery.RequireSignedPlans), so a retry
	// tool.call appended by anything but jingwei gets no plan
	// (unauthorized_retry); and a jw_plans record another recoverer
	// stored is handed out only when its plan verifies against them
	// (plan_untrusted otherwise). Defaults to PlannerKey's public key
	// alone; list every recoverer's key when several run.
	TrustedPlanners recovery.TrustedKeys
	// AutoPlan, when true, issues a plan for every retry_allowed assessment
	// the recoverer publishes, without a prepare request (one whose prepare
	// fails for a transient reason is tried again every second while the
	// recoverer runs; at start, every call whose latest assessment is
	// retry_allowed and that has no plan is queued again). Defaults to false:
	// plans are issued on explicit prepare requests only.
	AutoPlan bool
	// Name identifies this recoverer: it names its durable consumers
	// (<prefix>-recoverer-<Name>-events and -reviews), so a restart resumes
	// where it stopped. Every concurrently running recoverer needs its own
	// Name. 1–64 bytes of [A-Za-z0-9_-]. Defaults to "main".
	Name string
	// Owner is the lease owner and fence owner the recoverer takes sessions
	// over as. Defaults to "recoverer-<Name>-<random>", unique per process.
	Owner string
	// DisableService skips registering the `jingwei` micro service
	// (inspect, prepare, status; the recoverer then only consumes, takes
	// over and issues plans through its methods). Defaults to false: the
	// service runs. jw.api.call is the tool workers' (toolworker.Gateway).
	DisableService bool
	// Observer, when non-nil, is told of every published assessment and
	// every takeover (metrics). Nil tells no one.
	Observer Observer
	// Now is the clock plans are stamped with. Defaults to time.Now.
	Now func() time.Time
	// Parallelism is how many sessions the recoverer takes over at once
	// when a partition's lease expires (a recovery storm) and when it
	// reconciles at start. Defaults to DefaultParallelism.
	Parallelism int
	// IdentityInterval is how often the recoverer compares the protected
	// streams with the identity setup recorded (stream.CheckIdentity);
	// prepare compares them again itself before it plans. While one was
	// replaced (deleted and created again, or messages removed from its
	// start) prepare and takeovers refuse with stream_replaced until an
	// operator confirms (`jingwei setup --confirm-replaced`). Defaults to
	// DefaultIdentityInterval.
	IdentityInterval time.Duration
}

// DefaultIdentityInterval is Config.IdentityInterval's default.
const DefaultIdentityInterval = 5 * time.Second

// DefaultParallelism is Config.Parallelism's default.
const DefaultParallelism = 128

// DefaultName is Config.Name's default.
const DefaultName = "main"

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Owner == "" {
		c.Owner = "recoverer-" + c.Name + "-" + nuid.Next()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Parallelism <= 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.IdentityInterval <= 0 {
		c.IdentityInterval = DefaultIdentityInterval
	}
	if len(c.TrustedPlanners) == 0 && c.PlannerKey != nil {
		if pub, err := c.PlannerKey.PublicKey(); err == nil {
			c.TrustedPlanners, _ = recovery.NewTrustedKeys(pub)
		}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Topology == nil:
		return fmt.Errorf("%w: Topology is required", ErrInvalidConfig)
	case len(c.Name) > 64 || !schema.ValidSession(c.Name):
		return fmt.Errorf("%w: Name %q must be 1-64 bytes of [A-Za-z0-9_-]", ErrInvalidConfig, c.Name)
	case c.PlannerKey == nil:
		return fmt.Errorf("%w: PlannerKey is required (plans are signed)", ErrInvalidConfig)
	}
	if pub, err := c.PlannerKey.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return fmt.Errorf("%w: PlannerKey must be an nkey user key pair", ErrInvalidConfig)
	}
	return nil
}
