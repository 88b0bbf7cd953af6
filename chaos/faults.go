package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/jingwei/jingwei/internal/pause"
)

// plannedFault is one fault of the schedule, drawn from the seed before
// the run starts.
type plannedFault struct {
	At   time.Duration
	Kind string // recoverer_kill, node_kill, partition, pause
	Node int    // node_kill, partition
	// For is how long the fault lasts: a node down, a partition, a
	// recovery worker down before its restart (0.2 to 1.5 s), a pause at
	// least (lease TTL + 1 to 3 s).
	For    time.Duration
	Target int // pause: the worker slot
}

// schedule draws the faults that happen at planned times (tool-worker kills
// are drawn as the run goes, one every KillEvery): recovery-worker kills
// at random times over the run, the cluster faults (node kills in turn,
// partitions) one after another at even intervals, and pauses.
func schedule(rng *rand.Rand, cfg Config) []plannedFault {
	d := cfg.Duration
	var out []plannedFault
	for range n(cfg.RecovererKills) {
		out = append(out, plannedFault{At: d/10 + time.Duration(rng.Int64N(int64(d*8/10))), Kind: "recoverer_kill",
			For: 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond)))})
	}
	if cfg.Mode == ModeCluster {
		// In turn: a node kill, a partition, the next node kill, …
		var cl []plannedFault
		first := rng.IntN(cfg.Nodes)
		for i := range max(n(cfg.NodeKills), n(cfg.Partitions)) {
			if i < n(cfg.NodeKills) {
				cl = append(cl, plannedFault{Kind: "node_kill", Node: (first + i) % cfg.Nodes, For: cfg.NodeDown})
			}
			if i < n(cfg.Partitions) {
				cl = append(cl, plannedFault{Kind: "partition", Node: rng.IntN(cfg.Nodes), For: cfg.PartitionFor})
			}
		}
		for i := range cl {
			cl[i].At = d/10 + d*8/10*time.Duration(i)/time.Duration(len(cl))
		}
		out = append(out, cl...)
	}
	for i := range n(cfg.Pauses) {
		out = append(out, plannedFault{At: d/5 + d*6/10*time.Duration(i)/time.Duration(max(n(cfg.Pauses), 1)) + time.Duration(rng.Int64N(int64(d/20)+1)),
			Kind: "pause", Target: rng.IntN(cfg.Workers), For: cfg.LeaseTTL + time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// faultLog records the faults as they happen.
type faultLog struct {
	t0 time.Time
	mu sync.Mutex
	fs []Fault
}

func (l *faultLog) add(at time.Time, kind, target, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fs = append(l.fs, Fault{At: Seconds(at.Sub(l.t0).Seconds()), Kind: kind, Target: target, Detail: detail})
}

func (l *faultLog) list() []Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]Fault(nil), l.fs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

func (l *faultLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.fs {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool { return pause.For(ctx, d) == nil }

// waitListening waits until addr accepts TCP connections.
func waitListening(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: nothing listens on %s after %s: %v", ErrNotReady, addr, d, err)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}
