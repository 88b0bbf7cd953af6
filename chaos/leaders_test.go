package chaos

import (
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/tools"
)

// TestLeaderWindows: a window is what the healthy nodes see — the dead
// node's silence and a cut-off node's stale "I lead" both left out — and a
// single lost question is not an election.
func TestLeaderWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	outages := map[int][]interval{0: {{at(1), at(7)}}, 2: {{at(20), at(26)}}}
	var obs []observation
	for ms := 0; ms < 30000; ms += 100 {
		s := float64(ms) / 1000
		for node := range 3 {
			leader := "n1"
			switch {
			case node == 0 && s >= 1 && s < 7: // down: nothing answers
				leader = ""
			case s >= 1.2 && s < 5.5: // the election after the kill
				leader = ""
			case s == 9: // one question lost, on every node
				leader = ""
			case node == 2 && s >= 20 && s < 26: // cut off: its own stale leader
				leader = "n2"
			case s >= 20.3 && s < 24.8: // the majority elects
				leader = ""
			}
			obs = append(obs, observation{At: at(s), Node: node, Target: leaderEvents, Leader: leader})
			obs = append(obs, observation{At: at(s), Node: node, Target: leaderLeases, Leader: "n1"})
			consumer := "n2" // the classifier's consumer, created at 2 s: no window before
			if s < 2 {
				consumer = ""
			}
			obs = append(obs, observation{At: at(s), Node: node, Target: leaderClassifier, Leader: consumer})
		}
	}
	ws := leaderWindows(obs, outages, minLeaderWindow)
	want := []leaderWindow{{leaderEvents, interval{at(1.2), at(5.5)}}, {leaderEvents, interval{at(20.3), at(24.8)}}}
	if len(ws) != len(want) {
		t.Fatalf("windows %v, want %v", ws, want)
	}
	for i := range ws {
		if ws[i].Target != want[i].Target || !ws[i].From.Equal(want[i].From) || !ws[i].To.Equal(want[i].To) {
			t.Errorf("window %d %v, want %v", i, ws[i], want[i])
		}
	}
	faults := []Fault{{At: 1, Kind: "node_kill", Target: "node-0"}, {At: 7, Kind: "node_restart", Target: "node-0"}, {At: 20, Kind: "partition", Target: "node-2"}, {At: 26, Kind: "heal", Target: "node-2"}}
	got := nodeOutages(t0, faults, at(30))
	if len(got[0]) != 1 || !got[0][0].From.Equal(at(1)) || !got[0][0].To.Equal(at(7)) || len(got[2]) != 1 || !got[2][0].To.Equal(at(26)) {
		t.Errorf("outages %v, want node-0 1s..7s and node-2 20s..26s", got)
	}
	rw := reportWindows(t0, ws, faults, -1)
	if rw[0].After != "node_kill node-0 +1.0s" || rw[1].After != "partition node-2 +20.0s" || rw[0].Length < 4.29 || rw[0].Length > 4.31 {
		t.Errorf("report windows %+v, want each after its fault, the first 4.3s long", rw)
	}
	// Node 2's own view while cut off: it answered for itself, so it saw no
	// window; node 0's while down: the whole outage.
	iso := isolatedWindows(obs, outages, minLeaderWindow)
	if len(iso[2]) != 1 || !iso[2][0].From.Equal(at(1.2)) {
		t.Errorf("node-2's own windows %v, want only the election it shared", iso[2])
	}
}

// TestLatencySplit: a sample whose lease expired in a leaderless window,
// one taken with a node down and every leader there, and one on a whole
// cluster each go to their group; the bound is checked on the node-down
// group only, and Strict gates on that row.
func TestLatencySplit(t *testing.T) {
	h := newHist()
	base := h.clock()
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	h.call("s1", "c1", tools.OrdersCreate, "r1", "w1", 1)                                   // 1
	h.call("s2", "c2", tools.OrdersCreate, "r2", "w2", 1)                                   // 2
	h.call("s3", "c3", tools.OrdersCreate, "r3", "w3", 1)                                   // 3
	h.fence("s1", 2)                                                                        // 4
	h.assess("s1", "c1", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // 5
	h.fence("s2", 2)                                                                        // 6
	h.assess("s2", "c2", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // 7
	h.fence("s3", 2)                                                                        // 8
	h.assess("s3", "c3", schema.OutcomeUncertain, "no_result", schema.DecisionRetryAllowed) // 9
	f := &facts{
		Kills: []kill{{"w1", at(3.5)}, {"w2", at(5.5)}, {"w3", at(7.5)}},
		Bound: 3 * time.Second, BoundText: "<= 3s", LeaseTTL: 500 * time.Millisecond,
		Split:      true,
		Windows:    []leaderWindow{{leaderEvents, interval{at(3.8), at(4.6)}}},
		Outages:    map[int][]interval{0: {{at(5.8), at(7.5)}}},
		SplitBound: time.Second, SplitBoundText: "<= 1s",
	}
	rows, lat := check(f, &h.s)
	sp := lat.Split
	if lat.Samples != 3 || sp == nil {
		t.Fatalf("latency %+v, want 3 samples and a split", lat)
	}
	if sp.Leaderless.Samples != 1 || sp.Leaderless.Max != 1.5 || sp.NodeDown.Samples != 1 || sp.NodeDown.Max != 1.5 || sp.Healthy.Samples != 1 {
		t.Errorf("split %+v, want one sample in each group", sp)
	}
	// c1: 1.5 s, of which 0.6 s (4.0–4.6) without a leader; fenced at 4,
	// before the leader was back: no "back → fence" figure.
	if b := sp.LeaderlessBeyondWindows; b.Samples != 1 || b.Max != 0.9 {
		t.Errorf("beyond the windows %+v, want 0.9s", b)
	}
	if b := sp.LeadersBackToFence; b.Samples != 0 {
		t.Errorf("leaders back -> fence %+v, want none", b)
	}
	r := rowOf(t, rows, rowLatencyNodeDown)
	if r.Value != 1.5 || r.Met || r.Target != "<= 1s" || len(r.Examples) != 1 {
		t.Errorf("node-down row %+v, want 1.5s over its 1s bound, with its sample", r)
	}
	strict(rows, true)
	for _, r := range rows {
		if r.Must != (r.Name != rowLatency+" p99" && r.Name != rowLatency+" p50" && r.Name != rowLatency+" p90" && r.Name != rowLatency+" max" && r.Name != rowLatencyBeyond && r.Name != rowLateEffects && r.Name != rowConcurrent && r.Name != rowRepeated) {
			t.Errorf("after strict, row %q must=%v", r.Name, r.Must)
		}
	}
	groups := map[string]string{}
	for _, ls := range lat.List {
		groups[ls.Call] = ls.Group
	}
	if groups["s1/c1"] != "leaderless" || groups["s2/c2"] != "node_down" || groups["s3/c3"] != "healthy" {
		t.Errorf("sample groups %v", groups)
	}
	// The recovery worker killed while c3 waited: that group, not healthy.
	f.RecovererKills = []time.Time{at(8.2)}
	_, lat = check(f, &h.s)
	if sp := lat.Split; sp.RecovererRestart.Samples != 1 || sp.Healthy.Samples != 0 || sp.NodeDown.Samples != 1 {
		t.Errorf("split %+v, want c3 in recoverer_restart", sp)
	}
	f.RecovererKills = nil
	// One node: no split, and Strict gates on every sample's p99.
	f.Split = false
	rows, lat = check(f, &h.s)
	if lat.Split != nil {
		t.Errorf("split %+v without a monitor", lat.Split)
	}
	strict(rows, false)
	if r := rowOf(t, rows, rowLatency+" p99"); !r.Must {
		t.Errorf("single-node strict: p99 row %+v not a must", r)
	}
}
