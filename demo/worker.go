package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
	"github.com/jingwei/jingwei/worker/toolworker"
)

// HoldPoint says where a held tool's body stops and waits for the process to
// be killed.
type HoldPoint string

// Hold points.
const (
	// HoldBefore stops the body before its side effect: the call is started
	// but nothing happened in the business system.
	HoldBefore HoldPoint = "before"
	// HoldAfter runs the side effect and then stops before the body
	// returns: the business record exists, the result never reaches the log.
	HoldAfter HoldPoint = "after"
)

// heldTimeout is the timeout of a held tool: longer than any demo step, so
// the body is killed, never timed out.
const heldTimeout = 5 * time.Minute

// ParseHolds parses "tool=before|after,…" (the worker child's --hold flag).
// An empty string holds nothing.
func ParseHolds(s string) (map[string]HoldPoint, error) {
	holds := map[string]HoldPoint{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, point, ok := strings.Cut(part, "=")
		if !ok || (HoldPoint(point) != HoldBefore && HoldPoint(point) != HoldAfter) {
			return nil, fmt.Errorf("%w: hold %q: want tool=before or tool=after", ErrInvalidConfig, part)
		}
		holds[name] = HoldPoint(point)
	}
	return holds, nil
}

// FormatHolds is the inverse of ParseHolds.
func FormatHolds(holds map[string]HoldPoint) string {
	parts := make([]string, 0, len(holds))
	for name, p := range holds {
		parts = append(parts, name+"="+string(p))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// HoldTools returns the example tools with the bodies of the tools named in
// holds replaced by bodies that stop at their hold point until their context
// ends (they then return the context's error). It stands in for a process
// that dies in the middle of a tool body: the demo kills the process while
// the body waits. Tools not in holds are unchanged.
func HoldTools(t *tools.Tools, holds map[string]HoldPoint) []worker.Tool {
	list := t.List()
	for i, tl := range list {
		point, ok := holds[tl.Metadata.Name]
		if !ok {
			continue
		}
		body := tl.Body
		list[i].Timeout = heldTimeout
		list[i].Body = func(ctx context.Context, req worker.BodyRequest) (json.RawMessage, error) {
			if point == HoldAfter {
				if _, err := body(ctx, req); err != nil {
					return nil, err
				}
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	return list
}

// WorkerConfig configures RunWorker: the demo's tool worker child process.
type WorkerConfig struct {
	// Connect says how to reach the server. Required: URL.
	Connect natsnode.ConnectConfig
	// Topology is the topology configuration; its LeaseTTL is the TTL of
	// the worker's leases. The zero value is the defaults.
	Topology stream.TopologyConfig
	// Holds names the tools whose bodies stop at a hold point (see
	// HoldTools). Nil holds nothing.
	Holds map[string]HoldPoint
	// Planners are the plan signers whose retry plans the worker runs. Nil
	// runs none.
	Planners recovery.TrustedKeys
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// RunWorker runs a tool worker (package toolworker) with the example tools,
// held as cfg.Holds says, until ctx ends. The demo runs it as a child
// process (`jingwei demo worker`) and kills it with SIGKILL while a held body
// waits.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	cfg.Topology.Logger = cfg.Logger
	nc, err := natsnode.Connect(ctx, cfg.Connect)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	topo, err := stream.EnsureTopology(ctx, js, cfg.Topology)
	if err != nil {
		return err
	}
	tl, err := tools.New(ctx, tools.Config{JS: js, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	reg, err := worker.NewRegistry(HoldTools(tl, cfg.Holds)...)
	if err != nil {
		return err
	}
	w, err := toolworker.New(toolworker.Config{Topology: topo, Registry: reg, Logger: cfg.Logger, Runtime: worker.Config{TrustedPlanners: cfg.Planners}})
	if err != nil {
		return err
	}
	cfg.Logger.Info().Str("owner", w.Owner()).Str("holds", FormatHolds(cfg.Holds)).Msg("demo tool worker running")
	return w.Run(ctx)
}
