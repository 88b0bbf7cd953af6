package toolworker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/schema"
)

// sessionIndex is the gateway's fallback for the calls of one session
// whose tool worker's word did not come (a worker that crashed, a gateway
// restarted, a request already answered before, a worker of an older
// jingwei): where each request id's tool.call, each call's tool.result and
// each request's answer are, read once from the start of the session's log
// and its answers and then only from where the last read stopped. All the
// pending calls of the session share it, and one read at a time refreshes
// it (a call that waited for a read made after it asked reads nothing):
// the work of a refresh is the events appended since the last one,
// whatever the number of calls waiting.
type sessionIndex struct {
	session string

	sem       chan struct{} // held through a refresh: one at a time
	ansNext   uint64        // first answers seq not read; the refresh's
	mu        sync.Mutex    // guards the rest
	next      uint64        // first events seq not read
	refreshed time.Time     // when the last refresh started
	calls     map[string]uint64
	results   map[string]uint64
	answers   map[string]schema.Answer

	// guarded by the gateway's imu
	refs int
	idle time.Time
}

// indexKeep is how many session indexes without a pending call the
// gateway keeps (so the next fallback of a session reads only what is new);
// indexIdle is how long one is kept at most.
const (
	indexKeep = 256
	indexIdle = time.Minute
)

// index returns the session's index, counted as used until release.
func (g *Gateway) index(session string) *sessionIndex {
	g.imu.Lock()
	defer g.imu.Unlock()
	x := g.indexes[session]
	if x == nil {
		x = &sessionIndex{session: session, sem: make(chan struct{}, 1), next: 1, ansNext: 1, calls: map[string]uint64{}, results: map[string]uint64{}, answers: map[string]schema.Answer{}}
		g.indexes[session] = x
	}
	x.refs++
	return x
}

// releaseIndex ends one use of x; idle indexes beyond indexKeep, or
// older than indexIdle, are dropped.
func (g *Gateway) releaseIndex(x *sessionIndex) {
	g.imu.Lock()
	defer g.imu.Unlock()
	x.refs--
	now := time.Now()
	x.idle = now
	if x.refs > 0 {
		return
	}
	idle := 0
	for id, y := range g.indexes {
		if y.refs == 0 {
			if now.Sub(y.idle) > indexIdle {
				delete(g.indexes, id)
				continue
			}
			idle++
		}
	}
	if idle > indexKeep {
		delete(g.indexes, x.session)
	}
}

// refresh reads what was appended to the session's log and answers since
// the last refresh, unless one started after asked. With wait false it
// returns at once (nothing read) while another refresh runs: that one
// serves the caller's next look. A refresh keeps what it read even when it
// fails half way (ctx ended): the next one goes on from there.
func (x *sessionIndex) refresh(ctx context.Context, g *Gateway, asked time.Time, wait bool) error {
	if wait {
		select {
		case x.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else {
		select {
		case x.sem <- struct{}{}:
		default:
			return nil
		}
	}
	defer func() { <-x.sem }()
	x.mu.Lock()
	// A refresh started after the caller asked, or (a look on its own)
	// within refreshEvery, serves it.
	done := x.refreshed.After(asked) || !wait && time.Since(x.refreshed) < refreshEvery
	if !done {
		x.refreshed = time.Now()
	}
	next := x.next
	x.mu.Unlock()
	if done {
		return nil
	}
	events := g.t.Events.CachedInfo().Config.Name
	subject := g.t.Names().EventsSubject(x.session)
	add := func(m *jetstream.RawStreamMsg) error {
		if m.Sequence < next {
			return nil
		}
		var e indexed
		if json.Unmarshal(m.Data, &e) == nil {
			x.add(m.Sequence, e)
		}
		x.mu.Lock()
		x.next = m.Sequence + 1
		x.mu.Unlock()
		return nil
	}
	// The events after the last read only, in batches of direct gets;
	// what a batch brings is kept even if a later one fails.
	var err error
	for ctx.Err() == nil {
		var msgs []*jetstream.RawStreamMsg
		msgs, err = g.t.Reader().DirectBatch(ctx, events, subject, next, indexBatch)
		if err != nil {
			break
		}
		for _, m := range msgs {
			_ = add(m)
			next = m.Sequence + 1
		}
		if len(msgs) < indexBatch {
			break
		}
	}
	if err != nil {
		return err
	}
	// The answers, one message get each from where the last read stopped.
	ans := g.t.AnswerLog.CachedInfo().Config.Name
	for range answersPerRefresh {
		m, ok, err := g.t.Reader().LeaderGet(ctx, ans, x.ansNext, g.t.Names().AnswersSubject(x.session))
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		x.ansNext = m.Sequence + 1
		var a schema.Answer
		if schema.Unmarshal(m.Data, &a) == nil && a.Session == x.session && a.RequestID != "" {
			x.mu.Lock()
			// Keyed by request id and digest: another request refused
			// under the same id is not this one's answer (its digest
			// differs, stream.RequestDigestHex).
			if k := answerKey(a.RequestID, a.RequestDigest); x.answers[k].RequestID == "" {
				x.answers[k] = a
			}
			x.mu.Unlock()
		}
	}
	return nil
}

// refreshEvery is the least time between two refreshes of a session's
// index for calls looking on their own: however many calls of the session
// wait, their looks read its log at most this often.
const refreshEvery = 50 * time.Millisecond

// indexBatch is how many events one direct get of a refresh asks for.
const indexBatch = 256

// indexed is what the index reads of an event: the ids of a tool.call or
// a tool.result (a light decode: the index only points at events, which
// are read and checked in full when a call is answered from them).
type indexed struct {
	Type string `json:"type"`
	Call *struct {
		CallID    string `json:"call_id"`
		RequestID string `json:"request_id"`
	} `json:"call"`
	Result *struct {
		CallID string `json:"call_id"`
	} `json:"result"`
}

// add indexes the event e at seq.
func (x *sessionIndex) add(seq uint64, e indexed) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case e.Type == schema.TypeCall && e.Call != nil && e.Call.RequestID != "":
		if _, ok := x.calls[e.Call.RequestID]; !ok {
			x.calls[e.Call.RequestID] = seq
		}
	case e.Type == schema.TypeResult && e.Result != nil && e.Result.CallID != "":
		if _, ok := x.results[e.Result.CallID]; !ok {
			x.results[e.Result.CallID] = seq
		}
	}
}

// answersPerRefresh bounds the answers one refresh reads (the rest next
// time).
const answersPerRefresh = 1000

// lookup returns what the index holds for request id and call id (call id
// "": not known yet).
func (x *sessionIndex) lookup(requestID, digest, callID string) (callSeq, resultSeq uint64, a schema.Answer, answered bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	callSeq = x.calls[requestID]
	if callID != "" {
		resultSeq = x.results[callID]
	}
	a, answered = x.answers[answerKey(requestID, digest)]
	return
}

// answerKey is the index key of the answer to the request with this id
// and digest (stream.RequestDigestHex; an answer recorded without one,
// before answers carried it, is found under the empty digest only).
func answerKey(requestID, digest string) string { return requestID + "\x00" + digest }

// resultOf returns the seq of call id's tool.result, 0 if not indexed.
func (x *sessionIndex) resultOf(callID string) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.results[callID]
}

// eventAt returns the event stored at seq of the session's log (ok false
// when seq holds none of it): a direct get, and the stream leader's
// message get when the replica that answered does not have it (it lags).
func (g *Gateway) eventAt(ctx context.Context, session string, seq uint64) (schema.Event, bool, error) {
	events, subject := g.t.Events.CachedInfo().Config.Name, g.t.Names().EventsSubject(session)
	msgs, err := g.t.Reader().DirectBatch(ctx, events, subject, seq, 1)
	if err != nil || len(msgs) == 0 || msgs[0].Sequence != seq {
		m, ok, err := g.t.Reader().LeaderGet(ctx, events, seq, subject)
		if err != nil || !ok || m.Sequence != seq {
			return schema.Event{}, false, err
		}
		msgs = []*jetstream.RawStreamMsg{m}
	}
	ev, err := decodeStored(session, msgs[0])
	return ev, err == nil, err
}

// decodeStored decodes a stored event of session and stamps its seq.
func decodeStored(session string, m *jetstream.RawStreamMsg) (schema.Event, error) {
	ev, err := schema.DecodeEvent(m.Data)
	if err != nil {
		return schema.Event{}, schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, m.Sequence, err)
	}
	ev.Seq = m.Sequence
	return ev, nil
}
