package natsnode

import (
	"testing"
	"time"
)

// TestQuorumStateWaitsOutAnElection checks the decision alone: failures
// shorter than After (a raft election every server sees) move nothing;
// a spell of After forces one reconnect; the next server gets its own
// spell, twice as long while nothing was answered (the whole cluster
// without a quorum), at most 4 × After; an answer resets everything, and
// a disconnect (nats.go moving anyway) starts a new spell.
func TestQuorumStateWaitsOutAnElection(t *testing.T) {
	const after = 10 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := quorumState{after: after}
	for d := time.Duration(0); d < after; d += time.Second {
		if a := s.observe(at(d), probeFailed, "503"); a != quorumNothing {
			t.Fatalf("failing for %s: action %d, want none before %s", d, a, after)
		}
	}
	if a := s.observe(at(after), probeFailed, "503"); a != quorumReconnect {
		t.Fatalf("failing for %s: action %d, want a reconnect", after, a)
	}
	// The next server: still failing, the wait doubles.
	if a := s.observe(at(after+after+time.Second), probeFailed, "503"); a != quorumNothing {
		t.Fatalf("second spell after %s: action %d, want none before 2 x After", after+time.Second, a)
	}
	if a := s.observe(at(3*after), probeFailed, "503"); a != quorumReconnect {
		t.Fatalf("second spell after 2 x After: action %d, want a reconnect", a)
	}
	if a := s.observe(at(6*after), probeFailed, "503"); a != quorumNothing {
		t.Fatalf("third spell after 3 x After: action %d, want none before 4 x After", a)
	}
	if a := s.observe(at(7*after), probeFailed, "503"); a != quorumReconnect {
		t.Fatalf("third spell after 4 x After: action %d, want a reconnect", a)
	}
	if got := s.wait(); got != 4*after {
		t.Fatalf("wait after 3 forced reconnects %s, want the 4 x After cap", got)
	}
	if a := s.observe(at(8*after), probeOK, ""); a != quorumRecovered {
		t.Fatalf("an answer after forced reconnects: action %d, want recovered", a)
	}
	if s.forced != 0 || !s.since.IsZero() || s.wait() != after {
		t.Fatalf("state after an answer %+v, want reset", s)
	}
	// A disconnect ends a spell: the wait starts again after it.
	s.observe(at(9*after), probeFailed, "no responders")
	s.observe(at(9*after+after-time.Second), probeUnknown, "not connected")
	if a := s.observe(at(10*after), probeFailed, "no responders"); a != quorumNothing {
		t.Fatalf("first failure after a disconnect: action %d, want none", a)
	}
	if a := s.observe(at(11*after), probeFailed, "no responders"); a != quorumReconnect {
		t.Fatalf("a full spell after the disconnect: action %d, want a reconnect", a)
	}
}
