package chaos

import (
	"fmt"
	"math"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// report builds the report from what the run gathered; it works on a run
// cut short too (the rows are then missing, Error says why).
func (h *harness) report() *Report {
	rep := h.newReport()
	if h.faults != nil {
		rep.Faults = h.faults.list()
	}
	if h.leaders != nil && h.faults != nil {
		h.leaderWindows(rep)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exercised(rep)
	if h.wl == nil || h.final == nil {
		return rep
	}
	f := h.gatherFacts(rep)
	rows, lat := check(f, h.final)
	if h.cfg.Strict {
		strict(rows, f.Split)
	}
	rep.Rows, rep.Latency = rows, lat
	h.countFinal(rep, f)
	return rep
}

// newReport is the report of the run's configuration, before anything
// is counted or checked.
func (h *harness) newReport() *Report {
	cfg := h.cfg
	rep := &Report{
		Seed: cfg.Seed, Mode: cfg.Mode, Label: cfg.label(), Elapsed: Seconds(time.Since(h.started).Seconds()),
		Config: ReportConfig{
			Actions: cfg.Actions, Sessions: cfg.Sessions, Workers: cfg.Workers, Nodes: cfg.Nodes, Replicas: cfg.Replicas,
			LeaseTTL: Seconds(cfg.LeaseTTL.Seconds()), Duration: Seconds(cfg.Duration.Seconds()),
			RecovererKills: n(cfg.RecovererKills), Pauses: n(cfg.Pauses), Republish: fraction(cfg.Republish), Sync: cfg.Sync,
			SlowFraction: fraction(cfg.SlowFraction), ToolDelay: Seconds(cfg.ToolDelay.Seconds()),
		},
		Latency: Latency{P50: Seconds(math.NaN()), P90: Seconds(math.NaN()), P99: Seconds(math.NaN()), Max: Seconds(math.NaN())},
	}
	if !cfg.NoWorkerKills {
		rep.Config.KillEvery = []Seconds{Seconds(cfg.KillEvery[0].Seconds()), Seconds(cfg.KillEvery[1].Seconds())}
	}
	if cfg.Mode == ModeCluster {
		rep.Config.NodeKills, rep.Config.Partitions = n(cfg.NodeKills), n(cfg.Partitions)
	}
	if cfg.Keep && h.dir != "" {
		rep.Dir = h.dir
	}
	return rep
}

// exercised counts what the run did (reviews, prepares, publishes,
// faults) and notes what went wrong on the way. h.mu is held.
func (h *harness) exercised(rep *Report) {
	e := &rep.Exercised
	rep.Notes = append(rep.Notes, h.notes...)
	e.ReviewsSigned, e.Prepares = copyCounts(h.reviews), copyCounts(h.prepares)
	e.HandledDuringPause, e.ConcurrentPrepares, e.SetupAttempts = h.duringPause, h.concurrent, h.setupAttempts
	if h.sup != nil {
		var notes []string
		e.UnexpectedExits, notes = h.sup.unexpected()
		rep.Notes = append(rep.Notes, notes...)
	}
	h.pub.mu.Lock()
	e.Published, e.Republished, e.PublishRetries, e.DuplicatePubAcks = h.pub.published, h.pub.again, h.pub.retries, h.pub.duplicateAcks
	for _, f := range h.pub.failed {
		rep.Notes = append(rep.Notes, "publish gave up: "+f)
	}
	h.pub.mu.Unlock()
	if h.faults != nil {
		e.WorkerKills, e.RecovererKills = h.faults.count("worker_kill"), h.faults.count("recoverer_kill")
		e.NodeKills, e.Pauses, e.Partitions = h.faults.count("node_kill"), h.faults.count("pause"), h.faults.count("partition")
	}
}

// gatherFacts gathers what the invariants are checked against: the actions and
// their acks, the kills, and the latency bound (and, on a cluster, the
// leaderless windows and outages it is split by). h.mu is held.
func (h *harness) gatherFacts(rep *Report) *facts {
	cfg := h.cfg
	f := &facts{Kills: h.kills, Checkpoint: h.checkpoint, HostNotes: h.hostNotes, ConcurrentMismatch: h.mismatch, Start: h.faults.t0, LeaseTTL: cfg.LeaseTTL}
	for i, a := range h.wl.actions {
		a.Acked = h.acked[i]
		f.Actions = append(f.Actions, a)
	}
	f.Bound, f.BoundText = cfg.LeaseTTL+time.Second, fmt.Sprintf("<= TTL+1s (%s)", cfg.LeaseTTL+time.Second)
	if cfg.Replicas > 1 {
		f.Bound, f.BoundText = cfg.LeaseTTL+5*time.Second, fmt.Sprintf("<= TTL+5s (%s)", cfg.LeaseTTL+5*time.Second)
	}
	if h.leaders != nil {
		f.Split = true
		f.Windows, f.Outages = h.windows, h.outages
		f.SplitBound, f.SplitBoundText = cfg.LeaseTTL+5*time.Second, fmt.Sprintf("<= TTL+5s (%s)", cfg.LeaseTTL+5*time.Second)
		for _, fl := range rep.Faults {
			if fl.Kind == "recoverer_kill" {
				f.RecovererKills = append(f.RecovererKills, h.faults.t0.Add(time.Duration(float64(fl.At)*float64(time.Second))))
			}
		}
	}
	return f
}

// countFinal counts the calls, results, retries, plans and business
// records of the final snapshot, and notes what did not decode or was
// still queued. h.mu is held.
func (h *harness) countFinal(rep *Report, f *facts) {
	e := &rep.Exercised
	x := newIndex(h.final)
	e.Actions = len(f.Actions)
	e.Calls = len(x.order)
	e.CallResults = map[string]int{}
	for _, k := range x.order {
		ci := x.calls[k]
		switch {
		case ci.Result == nil:
			e.CallResults["none"]++
		case ci.Result.Status == schema.StatusRejected:
			e.CallResults["rejected:"+string(ci.Result.Stage)]++
		default:
			e.CallResults[string(ci.Result.Status)]++
		}
		if ci.Call.Operation != nil && ci.Call.Operation.Retry != nil {
			e.Retries++
			if ci.Result != nil {
				e.PlansRun++
			}
		}
	}
	issued := map[string]bool{}
	for _, p := range h.final.Plans {
		issued[p.Plan.PlanID] = true
	}
	e.PlansIssued = len(issued)
	probeCounts(x, e)
	e.CallsLeftOpenByKills = len(leftOpen(f, x))
	paused := map[string]bool{}
	for _, o := range h.pauseOwners {
		paused[o] = true
	}
	for _, k := range x.order {
		if ci := x.calls[k]; paused[ci.Owner] && ci.Open() {
			e.CallsLeftOpenByPause++
		}
	}
	e.Orders, e.Charges, e.Assessments = len(h.final.Orders), len(h.final.Charges), len(h.final.Assessments)
	for stream, n := range h.final.Undecodable {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d messages of %s did not decode strictly", n, stream))
	}
	if h.final.PendingRequests > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests still in the work queue at the end", h.final.PendingRequests))
	}
}

// strict makes the latency bound a must-hold row (Config.Strict): on a
// cluster (split) the p99 of the samples taken with a node down and every
// leader there, on one node the p99 of all samples. The other latency
// rows stay printed, reported.
func strict(rows []Row, split bool) {
	gate := rowLatency + " p99"
	if split {
		gate = rowLatencyNodeDown
	}
	for i := range rows {
		if rows[i].Name == gate {
			rows[i].Must = true
		}
	}
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
