package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/stream/access"
)

// The JetStream leaders a takeover and its assessment need, as the leader
// monitor names them: the meta leader (consumer creation: a watcher or
// classifier consumer recreated after a node loss), the lease bucket's
// stream (the server's TTL expiry of a lease, the hold the recovery worker
// takes), the session logs' stream (the fence itself, and what the
// classifier reads) and the assessments' stream (the publish).
const (
	leaderMeta        = "meta"
	leaderEvents      = streamEvents
	leaderLeases      = "KV_" + subjectPrefix + "_leases"
	leaderAssessments = streamAssessments
)

// leaderClassifier is the recovery worker's durable consumer of the
// session logs (its classifier reads the fence through it), a raft group
// of its own with its own leader. The harness names its recovery worker
// "chaos".
const leaderClassifier = leaderEvents + "/" + subjectPrefix + "-recoverer-chaos-events"

// fencePath lists the leader monitor's targets in report order.
var fencePath = []string{leaderMeta, leaderLeases, leaderEvents, leaderClassifier, leaderAssessments}

// leaderPoll is how often the monitor asks each node, and leaderAsk how
// long one question may take before it counts as "no leader".
const (
	leaderPoll = 100 * time.Millisecond
	leaderAsk  = 300 * time.Millisecond
)

// observation is one answer (or its absence) to one monitor question.
type observation struct {
	At     time.Time // when the question was sent
	Node   int
	Target string
	Leader string // "" when no leader answered
}

// leaderMonitor asks, every leaderPoll, on an admin connection to each
// node of a cluster (that node only: no reconnect elsewhere, no
// discovered servers), who leads each target of the fence path: the
// answer of $JS.API.INFO for the meta leader (only the meta leader
// answers it), of $JS.API.STREAM.INFO for a stream and
// $JS.API.CONSUMER.INFO for the classifier's consumer (only the leader
// answers). A question unanswered within leaderAsk, or answered with an
// error, is an observation without a leader. The report turns the
// observations into leaderless windows ([leaderWindows]). Safe for
// concurrent use.
type leaderMonitor struct {
	conns []*nats.Conn
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu  sync.Mutex
	obs []observation
}

// startLeaderMonitor connects to every node of w as admin and polls until
// stop. A connection that cannot be made yet (a node not up) is retried by
// the client.
func startLeaderMonitor(w *network, keys access.KeyDir) (*leaderMonitor, error) {
	seed, err := nats.NkeyOptionFromSeed(keys.SeedFile(access.RoleAdmin))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &leaderMonitor{stop: cancel}
	for i := range w.size() {
		nc, err := nats.Connect(w.clientURL(i), seed, nats.Name(fmt.Sprintf("jingwei chaos leader monitor node-%d", i)),
			nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1), nats.ReconnectWait(leaderPoll),
			nats.RetryOnFailedConnect(true), nats.Timeout(time.Second))
		if err != nil {
			m.close()
			return nil, fmt.Errorf("leader monitor: connect to node-%d: %w", i, err)
		}
		m.conns = append(m.conns, nc)
		for _, target := range fencePath {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.poll(ctx, i, nc, target)
			}()
		}
	}
	return m, nil
}

func (m *leaderMonitor) poll(ctx context.Context, node int, nc *nats.Conn, target string) {
	subj := "$JS.API.INFO"
	switch stream, consumer, ok := strings.Cut(target, "/"); {
	case ok:
		subj = "$JS.API.CONSUMER.INFO." + stream + "." + consumer
	case target != leaderMeta:
		subj = "$JS.API.STREAM.INFO." + target
	}
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for {
		at := time.Now()
		o := observation{At: at, Node: node, Target: target}
		if nc.IsConnected() {
			if msg, err := nc.Request(subj, nil, leaderAsk); err == nil {
				o.Leader = leaderOf(target, msg.Data)
			}
		}
		m.mu.Lock()
		m.obs = append(m.obs, o)
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leaderOf reads the leader from an answer: the stream's cluster leader,
// or, for $JS.API.INFO (answered only by the meta leader), "meta" when it
// is not an error. "" when the answer is an error.
func leaderOf(target string, data []byte) string {
	var r struct {
		Error   *json.RawMessage `json:"error"`
		Cluster *struct {
			Leader string `json:"leader"`
		} `json:"cluster"`
	}
	if json.Unmarshal(data, &r) != nil || r.Error != nil {
		return ""
	}
	if target == leaderMeta {
		return "meta"
	}
	if r.Cluster == nil {
		return ""
	}
	return r.Cluster.Leader
}

// close stops the polling and the connections; observations stays
// readable.
func (m *leaderMonitor) close() {
	if m.stop != nil {
		m.stop()
	}
	m.wg.Wait()
	for _, nc := range m.conns {
		nc.Close()
	}
}

// observations returns a copy of what was observed, in time order.
func (m *leaderMonitor) observations() []observation {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]observation(nil), m.obs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// interval is a span of time [From, To).
type interval struct {
	From, To time.Time
}

func (iv interval) contains(t time.Time) bool { return !t.Before(iv.From) && t.Before(iv.To) }

func (iv interval) overlaps(from, to time.Time) bool { return iv.From.Before(to) && from.Before(iv.To) }

// nodeOutages returns, by node index, the spans in which a node was down
// (node_kill → node_restart) or cut off (partition → heal), from the
// faults as they happened; a fault never ended runs until end.
func nodeOutages(t0 time.Time, faults []Fault, end time.Time) map[int][]interval {
	out := map[int][]interval{}
	open := map[int]time.Time{}
	for _, f := range faults {
		var node int
		if _, err := fmt.Sscanf(f.Target, "node-%d", &node); err != nil {
			continue
		}
		at := t0.Add(time.Duration(float64(f.At) * float64(time.Second)))
		switch f.Kind {
		case "node_kill", "partition":
			open[node] = at
		case "node_restart", "heal":
			if from, ok := open[node]; ok {
				out[node] = append(out[node], interval{from, at})
				delete(open, node)
			}
		}
	}
	for node, from := range open {
		out[node] = append(out[node], interval{from, end})
	}
	return out
}

// outageAt reports whether some node was down or cut off at t.
func outageAt(outages map[int][]interval, t time.Time) bool {
	for _, ivs := range outages {
		for _, iv := range ivs {
			if iv.contains(t) {
				return true
			}
		}
	}
	return false
}

// leaderWindow is a span in which one target of the fence path had no
// leader that the healthy nodes could reach.
type leaderWindow struct {
	Target string
	interval
}

// leaderWindows turns observations into the leaderless windows of each
// target as the healthy side of the cluster sees them: only observations
// made on a node that was neither down nor cut off at the time count (a
// cut-off node answers with its own stale view, and nothing a process
// connected to the majority does goes through it). A window opens at the
// first observation without a leader after one with, and closes at the
// next observation with a leader, from any healthy node; windows shorter
// than minWindow (one question lost on a busy node) are dropped, and so is
// the time before a target first had a leader (a consumer not created
// yet).
func leaderWindows(obs []observation, outages map[int][]interval, minWindow time.Duration) []leaderWindow {
	var out []leaderWindow
	for _, target := range fencePath {
		var start time.Time
		lost, seen := false, false
		for _, o := range obs {
			if o.Target != target || nodeOut(outages, o.Node, o.At) {
				continue
			}
			if !seen {
				seen = o.Leader != ""
				continue
			}
			switch {
			case o.Leader == "" && !lost:
				lost, start = true, o.At
			case o.Leader != "" && lost:
				lost = false
				if o.At.Sub(start) >= minWindow {
					out = append(out, leaderWindow{target, interval{start, o.At}})
				}
			}
		}
		if lost && len(obs) > 0 {
			out = append(out, leaderWindow{target, interval{start, obs[len(obs)-1].At}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out
}

// isolatedWindows are the windows the faulted node itself saw while it
// was cut off or just restarted: what a process connected to it lived
// through (the routes cut, its JetStream without a quorum).
func isolatedWindows(obs []observation, outages map[int][]interval, minWindow time.Duration) map[int][]leaderWindow {
	out := map[int][]leaderWindow{}
	for node := range outages {
		var mine []observation
		for _, o := range obs {
			if o.Node == node {
				mine = append(mine, o)
			}
		}
		out[node] = leaderWindows(mine, nil, minWindow)
	}
	return out
}

func nodeOut(outages map[int][]interval, node int, t time.Time) bool {
	for _, iv := range outages[node] {
		if iv.contains(t) {
			return true
		}
	}
	return false
}

// LeaderWindow is, in the report, a span in which one JetStream leader the
// fence path needs was missing (no answer from the healthy nodes).
type LeaderWindow struct {
	// Target is meta (the JetStream meta leader), KV_jw_leases,
	// JW_EVENTS, JW_EVENTS/<the classifier's consumer> or JW_ASSESSMENTS.
	Target string `json:"target"`
	// From and To are times since the workload started.
	From Seconds `json:"from"`
	To   Seconds `json:"to"`
	// Length is To - From.
	Length Seconds `json:"length"`
	// After names the cluster fault this window began after ("node_kill
	// node-0 +6.0s"), or "" when none preceded it (the cluster's start).
	After string `json:"after,omitempty"`
	// Node is the node whose own view this is, for the windows a cut-off
	// or restarted node saw (Report.IsolatedLeaderWindows); -1 for the
	// healthy nodes' view.
	Node int `json:"node"`
}

// reportWindows writes windows for the report, each with the last cluster
// fault at or before its start (within 30 s).
func reportWindows(t0 time.Time, ws []leaderWindow, faults []Fault, node int) []LeaderWindow {
	out := make([]LeaderWindow, 0, len(ws))
	for _, w := range ws {
		from, to := w.From.Sub(t0).Seconds(), w.To.Sub(t0).Seconds()
		lw := LeaderWindow{Target: w.Target, From: Seconds(from), To: Seconds(to), Length: Seconds(to - from), Node: node}
		for _, f := range faults {
			switch f.Kind {
			case "node_kill", "node_restart", "partition", "heal":
			default:
				continue
			}
			if float64(f.At) <= from+0.05 && from-float64(f.At) < 30 {
				lw.After = fmt.Sprintf("%s %s +%.1fs", f.Kind, f.Target, float64(f.At))
			}
		}
		out = append(out, lw)
	}
	return out
}

// windowSummary writes the windows as "meta 4.1s, JW_EVENTS 5.3s".
func windowSummary(ws []LeaderWindow) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s %.1fs", w.Target, float64(w.Length))
	}
	return strings.Join(parts, ", ")
}

// leaderWindows computes, from the monitor's observations and the faults,
// the leaderless windows and node outages the latency split uses, and
// writes them into rep.
func (h *harness) leaderWindows(rep *Report) {
	obs := h.leaders.observations()
	end := time.Now()
	if len(obs) > 0 {
		end = obs[len(obs)-1].At
	}
	h.outages = nodeOutages(h.faults.t0, rep.Faults, end)
	h.windows = leaderWindows(obs, h.outages, minLeaderWindow)
	rep.LeaderWindows = reportWindows(h.faults.t0, h.windows, rep.Faults, -1)
	iso := isolatedWindows(obs, h.outages, minLeaderWindow)
	nodes := make([]int, 0, len(iso))
	for n := range iso {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	for _, n := range nodes {
		var mine []leaderWindow
		for _, w := range iso[n] {
			// Only what it saw around its own outages (its view before
			// its first fault is the cluster's, already reported).
			for _, iv := range h.outages[n] {
				if w.overlaps(iv.From, iv.To.Add(30*time.Second)) {
					mine = append(mine, w)
					break
				}
			}
		}
		rep.IsolatedLeaderWindows = append(rep.IsolatedLeaderWindows, reportWindows(h.faults.t0, mine, rep.Faults, n)...)
	}
}

// minLeaderWindow is the shortest leaderless window reported: shorter ones
// are a question or two lost on a busy machine, not an election.
const minLeaderWindow = 250 * time.Millisecond

// windowLines writes the windows one line per fault they followed:
// "after node_kill node-0 +6.0s: meta 4.1s (+6.0s..+10.1s), …".
func windowLines(ws []LeaderWindow) []string {
	var lines []string
	var cur string
	var parts []string
	flush := func() {
		if len(parts) > 0 {
			lines = append(lines, cur+": "+strings.Join(parts, ", "))
		}
	}
	for _, w := range ws {
		key := "after " + w.After
		if w.After == "" {
			key = "before any cluster fault"
		}
		if w.Node >= 0 {
			key = fmt.Sprintf("node-%d's own view, %s", w.Node, key)
		}
		if key != cur {
			flush()
			cur, parts = key, nil
		}
		parts = append(parts, fmt.Sprintf("%s %.1fs (+%.1fs..+%.1fs)", w.Target, float64(w.Length), float64(w.From), float64(w.To)))
	}
	flush()
	return lines
}
