package chaos

import (
	"testing"
	"time"
)

// TestLeadersUpAsTheHealthyNodesSeeIt: the outage killer starts when every
// target of the fence path has a leader in the newest answer of some node
// other than the one out; what the node out says, answers from before the
// outage and one question lost on one busy node do not count.
func TestLeadersUpAsTheHealthyNodesSeeIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	m := &leaderMonitor{}
	add := func(ms, node int, target, leader string) {
		m.obs = append(m.obs, observation{At: at(ms), Node: node, Target: target, Leader: leader})
	}
	since := at(1000)
	// Before the outage every target had a leader: that is not "back".
	for _, tg := range fencePath {
		add(500, 0, tg, "n0")
		add(500, 2, tg, "n0")
	}
	if m.leadersUp(since, 0) {
		t.Fatal("leaders up on answers from before the outage")
	}
	// After it: node 0 (out) says every leader is there, the others see
	// none for JW_EVENTS.
	for _, tg := range fencePath {
		add(1200, 0, tg, "n0")
		l := "n1"
		if tg == leaderEvents {
			l = ""
		}
		add(1200, 1, tg, l)
		add(1200, 2, tg, l)
	}
	if m.leadersUp(since, 0) {
		t.Fatal("leaders up while no healthy node sees JW_EVENTS' leader (the node out's view counted)")
	}
	// JW_EVENTS' leader elected: node 1 sees it, node 2's question lost.
	add(1300, 1, leaderEvents, "n2")
	add(1300, 2, leaderEvents, "")
	if !m.leadersUp(since, 0) {
		t.Fatal("leaders not up once a healthy node sees every leader")
	}
	// Then lost again on every healthy node.
	add(1400, 1, leaderEvents, "")
	if m.leadersUp(since, 0) {
		t.Fatal("leaders up after every healthy node lost JW_EVENTS' leader again")
	}
}
