package chaos

import (
	"context"
	"fmt"
	"time"
)

// Tool-worker kills aimed at a node's outage. The cluster's crash →
// assessment bound (TTL + 5 s) is about a lease that expires while a node
// is down or cut off and every leader the takeover needs is there again;
// the random kills (one every Config.KillEvery) land in that span only a
// few times a run, so while a node is out the harness, once the leader
// monitor sees every leader of the fence path again on the other nodes,
// kills the tool worker with the most open calls (not fenced) every
// downKillEvery, instead of the random kills, until the span left before
// the node returns is too short for a lease to expire and its takeover to
// finish in it.
const (
	// downKillEvery is the range between two such kills: a restarted
	// worker takes sessions again within a second, so each kill still
	// finds calls open.
	downKillEvery  = 900 * time.Millisecond
	downKillJitter = 500 * time.Millisecond
	// downKillTail is what a kill needs after the lease TTL before the
	// node's return: the takeover and the assessment (well under a
	// second with the leaders there) with a margin.
	downKillTail = 1500 * time.Millisecond
	// leadersSettled is how long every leader must have been seen before
	// the kills start (one lost answer is not a leader back).
	leadersSettled = 300 * time.Millisecond
)

// leadersUp reports whether every target of the fence path has a leader
// as the nodes other than out see it: for each target, the newest
// observation made after since by some node other than out has one (as
// leaderWindows closes a window on any healthy node's answer: one
// question lost on a busy node is not an election). False while a target
// has no such observation yet.
func (m *leaderMonitor) leadersUp(since time.Time, out int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	type key struct {
		target string
		node   int
	}
	newest := map[key]bool{} // has a leader, in the node's newest answer
	up := map[string]bool{}
	for i := len(m.obs) - 1; i >= 0; i-- {
		o := m.obs[i]
		if o.Node == out || o.At.Before(since) {
			if o.At.Before(since.Add(-time.Second)) {
				break // appended in answer order: a second of slack
			}
			continue
		}
		k := key{o.Target, o.Node}
		if _, ok := newest[k]; ok {
			continue
		}
		newest[k] = o.Leader != ""
		if o.Leader != "" {
			up[o.Target] = true
		}
	}
	for _, target := range fencePath {
		if !up[target] {
			return false
		}
	}
	return true
}

// killsWhileOut runs while node is out (killed or cut off at from, back at
// until): it waits until every leader is back on the other nodes, then
// kills a tool worker with open calls every downKillEvery (+ jitter) until
// until - (lease TTL + downKillTail). It returns when ctx ends too.
func (h *harness) killsWhileOut(ctx context.Context, node int, from, until time.Time) {
	if h.leaders == nil || h.cfg.NoWorkerKills {
		return
	}
	last := until.Add(-(h.cfg.LeaseTTL + downKillTail))
	var since time.Time
	for {
		if time.Now().After(last) || ctx.Err() != nil {
			return
		}
		switch up := h.leaders.leadersUp(from.Add(500*time.Millisecond), node); {
		case !up:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		if !since.IsZero() && time.Since(since) >= leadersSettled {
			break
		}
		if !sleepCtx(ctx, leaderPoll) {
			return
		}
	}
	// The aimed kills replace the random ones until last: a random kill
	// of a worker with no call open (a restarted one takes sessions again
	// slowly while a node is out) measures nothing and leaves fewer
	// workers with calls to aim at.
	h.aiming.Add(1)
	defer h.aiming.Add(-1)
	h.log.Info().Int("node", node).Float64("leaders_back", time.Since(h.t0).Seconds()).Float64("until", last.Sub(h.t0).Seconds()).
		Msg("chaos: a node out with every leader back: tool-worker kills")
	rng, prof := h.rng(uint64(100+node)), h.rng(uint64(200+node))
	for time.Now().Before(last) {
		var best *slot
		most := 0
		for _, sl := range h.sup.live("worker") {
			owner, _ := h.sup.state(sl)
			c := 0
			for _, call := range h.live.openCalls(owner) {
				// A fenced call's lease is long gone (a worker just
				// resumed from a pause): killing it measures nothing and
				// would cut the zombie's late write the pause is about.
				if !call.Fenced {
					c++
				}
			}
			if c > most || c == most && best != nil && rng.IntN(2) == 0 {
				best, most = sl, c
			}
		}
		if best == nil || most == 0 {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		h.killWorker(ctx, best, h.drawProfile(prof), fmt.Sprintf(", node-%d out with every leader back", node))
		if !sleepCtx(ctx, downKillEvery+time.Duration(rng.Int64N(int64(downKillJitter)))) {
			return
		}
	}
}

// whileOut starts killsWhileOut for a node out from at for d and returns
// the function that waits for it to end.
func (h *harness) whileOut(ctx context.Context, node int, at time.Time, d time.Duration) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.killsWhileOut(ctx, node, at, at.Add(d))
	}()
	return func() { <-done }
}
