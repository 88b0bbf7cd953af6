// Package demo is the story `jingwei demo` tells: the reference scenario of
// jingwei through the real pipeline, with real processes.
//
// On a fresh embedded NATS server in a temporary directory, Run starts a
// recovery worker (`jingwei recover`) and a tool worker whose tool bodies
// stop in the middle (`jingwei demo worker`, see HoldTools) as child
// processes of the same binary. An agent publishes an orders.create request
// (idempotent) and a payments.charge request (non-idempotent); once both
// bodies have written their business record, the tool worker is killed with
// SIGKILL, so neither result reaches the log. The recovery worker notices the
// expired leases, fences the sessions and classifies both calls: the order is
// uncertain but safe to retry, the payment needs a review. A fresh tool worker
// runs the order's retry plan with the same operation key, and orders.create
// finds its order instead of placing a second one. The payment's retry is
// refused until it is reviewed: the recovery worker's prober raises the
// ledger's fence and looks the charge up (payments.lookup), and signs the
// truthful verdict as a probe's review, without a person: completed if the
// ledger has the charge (every retry is then refused), not_executed if it
// does not (the retry then runs once). A second payment, run by an agent in
// its own process, times out while its provider has not answered: nobody
// fenced its session, so the probe's "no charge yet" proves nothing; the
// probe attaches that evidence and decides nothing, the provider's late
// charge lands, and a person who checks the ledger signs completed. Then a
// payment above ApprovalAbove waits for a signed approval; its tool worker
// is killed while it waits, the approver approves while no worker runs,
// and a fresh worker takes the session over and charges exactly once.
//
// Run prints the story step by step and a final table of calls, outcomes,
// decisions, attempts and business records, and returns the same facts as a
// Report. Every child process is stopped on every exit path, and the kernel
// kills them if the demo itself dies (Linux).
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/proc"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Sessions and requests of the story.
const (
	OrderSession   = "demo-orders"
	PaymentSession = "demo-payments"
	Task           = "checkout-1"
	OrderRequest   = "r-order-1"
	PaymentRequest = "r-pay-1"
)

// Config configures Run. The zero value runs the story as `jingwei demo`
// does.
type Config struct {
	// Exe is the jingwei binary the child processes run. Defaults to
	// os.Executable() (the demo re-executes itself).
	Exe string
	// Out receives the story. Defaults to os.Stdout.
	Out io.Writer
	// Dir is the working directory (server store, keys, child logs).
	// Defaults to a new temporary directory, removed at the end unless
	// KeepDir is set.
	Dir string
	// KeepDir keeps Dir (with the child processes' logs) at the end.
	KeepDir bool
	// PaymentHold is where the payment's body is when the worker is killed:
	// HoldAfter (the default) after the ledger entry is written, so the
	// reviewer finds the charge and signs completed; HoldBefore before it,
	// so the reviewer signs not_executed and the retry charges once.
	PaymentHold HoldPoint
	// LeaseTTL is the lease TTL of the tool worker that is killed: how long
	// after the kill the recovery worker takes its sessions over. Defaults to
	// 2 s; at least 1 s.
	LeaseTTL time.Duration
	// StepTimeout bounds each step of the story. Defaults to 20 s.
	StepTimeout time.Duration
	// Logger receives the demo's diagnostics (the children log to their own
	// files in Dir). Defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.PaymentHold == "" {
		c.PaymentHold = HoldAfter
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 2 * time.Second
	}
	if c.StepTimeout <= 0 {
		c.StepTimeout = 20 * time.Second
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.PaymentHold != HoldAfter && c.PaymentHold != HoldBefore:
		return fmt.Errorf("%w: PaymentHold %q: want %q or %q", ErrInvalidConfig, c.PaymentHold, HoldBefore, HoldAfter)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("%w: LeaseTTL %s: at least 1s", ErrInvalidConfig, c.LeaseTTL)
	}
	return nil
}

// Report is what the story ended with.
type Report struct {
	// Calls are every tool.call of both sessions, in log order.
	Calls []CallRow `json:"calls"`
	// Orders is the number of order records orders.create wrote.
	Orders int `json:"orders"`
	// Charges is the number of ledger entries payments.charge wrote before
	// the approval part: the payment's and the slow payment's.
	Charges int `json:"charges"`
	// PaymentVerdict is the verdict that settled the payment: the
	// prober's, or a person's when the probe could not decide.
	PaymentVerdict schema.Verdict `json:"payment_verdict"`
	// PaymentSettledBy says who settled the payment: "probe <name>" or
	// "person <operator>".
	PaymentSettledBy string `json:"payment_settled_by"`
	// PaymentRetry is what became of the payment's retry: "refused
	// (completed)" or the retry's result status.
	PaymentRetry string `json:"payment_retry"`
	// Killed is the process id of the tool worker that was killed.
	Killed int `json:"killed_pid"`
	// Children are the process ids of every child process; all have exited
	// when Run returns.
	Children []int `json:"children"`
	// Undecided is what became of the payment the probe could not
	// decide (a slow provider's late charge): a person settled it.
	Undecided *UndecidedReport `json:"undecided,omitempty"`
	// Approval is what became of the approval part of the story.
	Approval *ApprovalReport `json:"approval,omitempty"`
}

// CallRow is one attempt in the final table.
type CallRow struct {
	Session  string `json:"session"`
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Effect   string `json:"effect"`
	Attempt  int    `json:"attempt"`
	Key      string `json:"key"`
	Result   string `json:"result"`
	Outcome  string `json:"outcome"`
	Decision string `json:"decision"`
}

// Run tells the story (see the package documentation). It returns the
// report, or an error naming the step that failed; children are stopped and
// the server shut down either way.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return Report{}, fmt.Errorf("demo: find own binary: %w", err)
		}
		cfg.Exe = exe
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "jingwei-demo-")
		if err != nil {
			return Report{}, err
		}
		dir = d
		if !cfg.KeepDir {
			defer os.RemoveAll(dir)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return Report{}, err
	}
	s := &story{cfg: cfg, dir: dir, out: cfg.Out, log: cfg.Logger,
		procs: &children{exe: cfg.Exe, dir: filepath.Join(dir, "logs")}, dead: map[*proc.Child]bool{}}
	defer s.shutdown()
	rep, err := s.run(ctx)
	if err != nil {
		s.say("FAILED", "%v", err)
	}
	if cfg.KeepDir || cfg.Dir != "" {
		s.say("kept", "server store, keys and child logs are in %s", dir)
	} else if err != nil {
		s.say("", "run again with --keep to keep the child processes' logs")
	}
	return rep, err
}

// embeddedConfig is the demo server's configuration.
func embeddedConfig(dir string, log zerolog.Logger) natsnode.EmbeddedConfig {
	// The server's notices would drown the story: warnings and errors only.
	if log.GetLevel() < zerolog.WarnLevel {
		log = log.Level(zerolog.WarnLevel)
	}
	return natsnode.EmbeddedConfig{Dir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:-1", Name: "jingwei-demo", Logger: log}
}
