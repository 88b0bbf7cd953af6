package toolworker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/worker"
)

// Config configures a Worker. Topology and Registry are required; every
// other field has a default.
type Config struct {
	// Topology is jingwei's streams and buckets (from stream.EnsureTopology).
	// Its LeaseTTL is the TTL of the leases the worker holds. Required.
	Topology *stream.Topology
	// LeaseTopology is the topology the worker's registration and
	// partition leases are renewed through. Defaults to one Run opens on a
	// connection of its own, made with the options of Topology's
	// connection (not its event handlers) and closed when Run returns, so
	// that request traffic on Topology's connection (a flood of
	// jw.api.call, large reads) cannot delay a renewal past the lease
	// TTL; if that connection cannot be made, Topology is used and a
	// warning logged. Set it to Topology to share one connection.
	LeaseTopology *stream.Topology
	// Registry holds the tools the worker runs. Required.
	Registry *worker.Registry
	// Owner identifies this worker in leases and on session.fenced events;
	// it must be unique among running workers. Defaults to
	// "tw-<hostname>-<pid>-<random>".
	Owner string
	// RenewInterval is how often the lease of every owned partition, and
	// the worker's registration, are renewed (one write each per
	// interval, whatever the number of sessions). Defaults to a third of
	// the topology's LeaseTTL; it must be shorter than the TTL.
	RenewInterval time.Duration
	// MaxSessions is the most sessions the worker runs a request or plan
	// of at once, over all its partitions. A session with work beyond it
	// waits for a slot with its requests held in order; every wait is
	// counted (Stats.Waits, Stats.Waiting) and logged at most once a
	// second. Defaults to DefaultMaxSessions.
	MaxSessions int
	// MaxHeld is the most requests (and, separately, plans) of one
	// partition the worker holds unacknowledged at once (the MaxAckPending
	// of the partition's consumers): the server delivers no more until
	// some are done. Defaults to DefaultMaxHeld.
	MaxHeld int
	// IdleTimeout is how long a session of an owned partition stays in
	// memory without a request or plan; it is confirmed again (reads only,
	// no fence, when its log still ends with this owner's event) when work
	// comes. Defaults to 10 s.
	IdleTimeout time.Duration
	// PollInterval is how often the worker reads the worker registry and
	// the partition leases to take free partitions up to its share
	// (partitions / live workers, rounded up) or give one beyond it back.
	// Defaults to 1 s.
	PollInterval time.Duration
	// AckWait is the ack wait of the partition consumers. Held messages
	// are kept in progress every AckWait/3, so this only matters for a
	// worker that stops renewing them without dying. Defaults to 30 s.
	AckWait time.Duration
	// DrainTimeout bounds how long Run waits, once its context is
	// cancelled, for running bodies to finish; then their contexts are
	// cancelled. Defaults to 30 s.
	DrainTimeout time.Duration
	// PlanRetryDelay is the delay of a negative acknowledgement of a plan
	// for a session another process owns. Defaults to 250 ms.
	PlanRetryDelay time.Duration
	// CallTimeout bounds how long the worker's gateway (jw.api.call) waits
	// for the tool.result of a request it published. Defaults to
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxCallsPerSession, MaxCallsPerCaller and Caller are the limits of
	// the worker's gateway on calls in flight (see GatewayConfig, whose
	// defaults they have).
	MaxCallsPerSession int
	MaxCallsPerCaller  int
	Caller             func(ctx context.Context) string
	// DisableGateway skips serving jw.api.call (the gateway's micro
	// service, service.GatewayName). Defaults to false: every worker
	// serves it, load balanced, on a connection of its own that Run opens
	// with the options of Topology's (Topology's own, if that fails: it
	// must then carry no other micro service).
	DisableGateway bool
	// Runtime is the template of every session's runtime: admission hooks,
	// BudgetLimit, DefaultTask, timeouts, output limit, clock. Its Session,
	// Log, Registry, Plans, Budget and Logger are set by the worker. The
	// zero value is the runtime's defaults.
	Runtime worker.Config
	// Logger receives the worker's log. Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// Defaults of Config.
const (
	DefaultMaxSessions    = 256
	DefaultMaxHeld        = 1000
	DefaultIdleTimeout    = 10 * time.Second
	DefaultPollInterval   = time.Second
	DefaultAckWait        = 30 * time.Second
	DefaultDrainTimeout   = 30 * time.Second
	DefaultPlanRetryDelay = 250 * time.Millisecond
)

// WithDefaults returns c with zero fields set to their defaults. The
// renewal default needs the topology; without one it stays zero.
func (c Config) WithDefaults() Config {
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.RenewInterval <= 0 && c.Topology != nil {
		c.RenewInterval = c.Topology.Config().LeaseTTL / 3
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.PlanRetryDelay <= 0 {
		c.PlanRetryDelay = DefaultPlanRetryDelay
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Topology == nil:
		return fmt.Errorf("%w: Topology is required", ErrInvalidConfig)
	case c.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrInvalidConfig)
	case c.Topology.Names().Partitions() < 1:
		return fmt.Errorf("%w: Topology has no partitions (a request queue made by an older jingwei, opened read-only)", ErrInvalidConfig)
	case c.RenewInterval >= c.Topology.Config().LeaseTTL:
		return fmt.Errorf("%w: RenewInterval %s must be shorter than the lease TTL %s", ErrInvalidConfig, c.RenewInterval, c.Topology.Config().LeaseTTL)
	case len(c.Owner) > 256:
		return fmt.Errorf("%w: Owner is over 256 bytes", ErrInvalidConfig)
	}
	return nil
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("tw-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
