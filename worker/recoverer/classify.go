package recoverer

import (
	"sync"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// openCall is what the classifier keeps of a call until its result arrives.
type openCall struct {
	id       string
	tool     string
	task     string
	key      string
	contract effect.Contract
	epoch    uint64
	seq      uint64
	marker   bool
	started  bool
	retry    bool // a retry: its assessment needs the chain, so it is loaded
	legacy   bool // no operation: no assessment (legacy_call)
}

// OpenCall describes a call that has no result yet, as jw.api.status shows
// it.
type OpenCall struct {
	Session  string          `json:"session"`
	CallID   string          `json:"call_id"`
	Tool     string          `json:"tool"`
	Task     string          `json:"task,omitempty"`
	Key      string          `json:"key,omitempty"`
	Contract effect.Contract `json:"contract"`
	Epoch    uint64          `json:"epoch"`
	Seq      uint64          `json:"seq"`
	Started  bool            `json:"started"`
}

// assess builds the assessment of a first attempt from its state.
func (c *openCall) assess(session string, status schema.Status, stage schema.Stage) schema.Assessment {
	out, ev, dec := recovery.Classify(status, stage, c.marker, c.started, c.contract)
	return schema.Assessment{
		Session: session, CallID: c.id, Tool: c.tool, Task: c.task, Key: c.key,
		Contract: c.contract, Outcome: out, Evidence: ev, Decision: dec,
		Attempts: 1, Chain: []string{c.id},
	}
}

// finding is what the classifier concluded from one event: an assessment
// ready to publish, or a call whose assessment needs its loaded history.
type finding struct {
	session string
	callID  string
	a       *schema.Assessment // nil: load the history and Inspect callID
}

// tracker is the classifier's state: the open calls per session. Safe for
// concurrent use (the event loop writes, status reads).
type tracker struct {
	mu       sync.Mutex
	sessions map[string]map[string]*openCall
	// corrupt holds the sessions with an event that does not decode: their
	// history is corrupt_history for Inspect (every call of it), so the
	// classifier assesses nothing more of them either.
	corrupt map[string]struct{}
	// fences holds the highest session.fenced epoch seen per session: an
	// event below it was written by a fenced writer, which makes the
	// history corrupt for Inspect, so here too.
	fences map[string]uint64
	open   int
	seen   uint64
}

func newTracker() *tracker {
	return &tracker{sessions: make(map[string]map[string]*openCall), corrupt: make(map[string]struct{}), fences: make(map[string]uint64)}
}

// markCorrupt drops the session's open calls and assesses nothing more of
// it. t.mu is held.
func (t *tracker) markCorrupt(session string) {
	t.open -= len(t.sessions[session])
	delete(t.sessions, session)
	delete(t.fences, session)
	t.corrupt[session] = struct{}{}
}

// observe classifies one event of session at stream sequence seq and
// appends what it concluded to out. The event is read with
// schema.DecodeEvent, the decoder recovery.Inspect reads histories with,
// so the classifier sees exactly the events `jingwei inspect` sees: a
// payload it refuses (a duplicate member name, a missing field, …) makes
// the history corrupt there, so here it makes the session corrupt: its open
// calls are dropped and nothing more of it is assessed (the error is
// returned, for the log, for the first such event only).
func (t *tracker) observe(session string, seq uint64, data []byte, out []finding) ([]finding, error) {
	t.mu.Lock()
	_, corrupt := t.corrupt[session]
	if corrupt {
		t.seen++
	}
	t.mu.Unlock()
	if corrupt {
		return out, nil
	}
	ev, err := schema.DecodeEvent(data)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen++
	if err != nil {
		t.markCorrupt(session)
		return out, err
	}
	// The rules Inspect applies across events (see recovery.Inspect): an
	// event of another session, or below an earlier fence, corrupts the
	// history from there on.
	fence, fenced := t.fences[session]
	switch {
	case ev.Session != session:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "event at seq %d belongs to session %q, not %q", seq, ev.Session, session)
	case fenced && ev.Epoch < fence:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "event at seq %d has epoch %d, below the session.fenced epoch %d before it (a fenced writer's)", seq, ev.Epoch, fence)
	case fenced && ev.Type == schema.TypeFenced && ev.Fence.Epoch < fence:
		t.markCorrupt(session)
		return out, schema.Errorf(schema.CodeCorruptHistory, "session.fenced at seq %d has epoch %d, below the earlier fence's %d", seq, ev.Fence.Epoch, fence)
	}
	// DecodeEvent guarantees the body of a known type.
	switch ev.Type {
	case schema.TypeCall:
		call := ev.Call
		c := &openCall{id: call.CallID, tool: call.Tool, epoch: ev.Epoch, seq: seq, marker: call.StartMarker}
		if op := call.Operation; op != nil {
			c.task, c.key, c.contract, c.retry = op.Task, op.Key, op.Contract, op.Retry != nil
		} else {
			c.legacy = true
		}
		calls := t.sessions[session]
		if calls == nil {
			calls = make(map[string]*openCall)
			t.sessions[session] = calls
		}
		if _, dup := calls[c.id]; !dup {
			t.open++
		}
		calls[c.id] = c
	case schema.TypeStarted:
		if c := t.sessions[session][ev.Started.CallID]; c != nil {
			c.started = true
		}
	case schema.TypeResult:
		id := ev.Result.CallID
		c := t.drop(session, id)
		switch {
		case c == nil || c.retry:
			// Opened before a restart, or a retry: the chain is in the log.
			out = append(out, finding{session: session, callID: id})
		case c.legacy:
		default:
			a := c.assess(session, ev.Result.Status, ev.Result.Stage)
			out = append(out, finding{session: session, callID: c.id, a: &a})
		}
	case schema.TypeFenced:
		t.fences[session] = max(fence, ev.Fence.Epoch)
		// Calls of older epochs can never get their result now: their
		// assessment is final.
		for id, c := range t.sessions[session] {
			if c.epoch >= ev.Fence.Epoch {
				continue
			}
			t.drop(session, id)
			switch {
			case c.retry:
				out = append(out, finding{session: session, callID: id})
			case c.legacy:
			default:
				a := c.assess(session, "", "")
				out = append(out, finding{session: session, callID: id, a: &a})
			}
		}
	}
	return out, nil
}

// drop removes and returns an open call (nil if not tracked). t.mu is held.
func (t *tracker) drop(session, id string) *openCall {
	calls := t.sessions[session]
	c := calls[id]
	if c == nil {
		return nil
	}
	delete(calls, id)
	t.open--
	if len(calls) == 0 {
		delete(t.sessions, session)
	}
	return c
}

// counts returns the events seen and the calls tracked as open.
func (t *tracker) counts() (seen uint64, open int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen, t.open
}

// list returns the open calls of session, or of every session when
// session is "".
func (t *tracker) list(session string) []OpenCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []OpenCall
	for s, calls := range t.sessions {
		if session != "" && s != session {
			continue
		}
		for _, c := range calls {
			out = append(out, OpenCall{Session: s, CallID: c.id, Tool: c.tool, Task: c.task, Key: c.key, Contract: c.contract, Epoch: c.epoch, Seq: c.seq, Started: c.started})
		}
	}
	return out
}
