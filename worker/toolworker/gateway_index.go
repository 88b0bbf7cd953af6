package toolworker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
	done := x.refreshed.After(asked)
	if !done {
		x.refreshed = time.Now()
	}
	next := x.next
	x.mu.Unlock()
	if done {
		return nil
	}
	events := g.t.Events.CachedInfo().Config.Name
	subject := g.t.EventsSubject(x.session)
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
	var err error
	if next <= 1 {
		// The first read: the whole log, in batches, kept as it comes.
		err = g.t.ReadSubject(ctx, events, subject, add)
	} else {
		// Then the events after the last read only: one message get
		// each for a few, then the rest at once.
		n := 0
		for ; n < smallRefresh; n++ {
			m, ok, gerr := g.leaderGet(ctx, events, next, subject)
			if gerr != nil || !ok {
				err = gerr
				break
			}
			_ = add(m)
			next = m.Sequence + 1
		}
		if err == nil && n == smallRefresh {
			var evs []schema.Event
			evs, err = g.t.LoadFrom(ctx, x.session, next)
			for _, ev := range evs {
				var e indexed
				if ev.Call != nil {
					e.Call = &struct {
						CallID    string `json:"call_id"`
						RequestID string `json:"request_id"`
					}{ev.Call.CallID, ev.Call.RequestID}
				}
				if ev.Result != nil {
					e.Result = &struct {
						CallID string `json:"call_id"`
					}{ev.Result.CallID}
				}
				e.Type = ev.Type
				x.add(ev.Seq, e)
				x.mu.Lock()
				x.next = ev.Seq + 1
				x.mu.Unlock()
			}
		}
	}
	if err != nil {
		return err
	}
	// The answers, one message get each from where the last read stopped.
	ans := g.t.Answers.CachedInfo().Config.Name
	for range answersPerRefresh {
		m, ok, err := g.leaderGet(ctx, ans, x.ansNext, g.t.AnswersSubject(x.session))
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
			if _, ok := x.answers[a.RequestID]; !ok {
				x.answers[a.RequestID] = a
			}
			x.mu.Unlock()
		}
	}
	return nil
}

// smallRefresh is how many new events a refresh reads with one message
// get each before it reads the rest of the log in batches.
const smallRefresh = 16

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
func (x *sessionIndex) lookup(requestID, callID string) (callSeq, resultSeq uint64, a schema.Answer, answered bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	callSeq = x.calls[requestID]
	if callID != "" {
		resultSeq = x.results[callID]
	}
	a, answered = x.answers[requestID]
	return
}

// resultOf returns the seq of call id's tool.result, 0 if not indexed.
func (x *sessionIndex) resultOf(callID string) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.results[callID]
}

// msgGet is the body of $JS.API.STREAM.MSG.GET.<stream>: the first
// message at or after seq on subject, from the stream leader.
type msgGet struct {
	Seq     uint64 `json:"seq"`
	NextFor string `json:"next_by_subj"`
}

// msgGetAnswer is its answer.
type msgGetAnswer struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Msg   *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// leaderGet reads the first message of streamName at or after seq on
// subject from the stream leader (a replica that lags never answers it);
// ok false when there is none.
func (g *Gateway) leaderGet(ctx context.Context, streamName string, seq uint64, subject string) (*jetstream.RawStreamMsg, bool, error) {
	body, _ := json.Marshal(msgGet{Seq: seq, NextFor: subject})
	var resp *nats.Msg
	var err error
	subj := g.apiPrefix() + "STREAM.MSG.GET." + streamName
	if _, ok := ctx.Deadline(); ok {
		resp, err = g.t.JS.Conn().RequestWithContext(ctx, subj, body)
	} else {
		resp, err = g.t.JS.Conn().Request(subj, body, g.t.Config().RequestTimeout)
	}
	if err != nil {
		return nil, false, err
	}
	var r msgGetAnswer
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, false, fmt.Errorf("toolworker: message get on %s: %w", streamName, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, false, nil
		}
		return nil, false, r.Error
	}
	if r.Msg == nil || r.Msg.Subject != subject {
		return nil, false, nil
	}
	return &jetstream.RawStreamMsg{Subject: r.Msg.Subject, Sequence: r.Msg.Sequence, Data: r.Msg.Data}, true, nil
}

// eventAt returns the event stored at seq of the session's log (ok false
// when seq holds none of it).
func (g *Gateway) eventAt(ctx context.Context, session string, seq uint64) (schema.Event, bool, error) {
	m, ok, err := g.leaderGet(ctx, g.t.Events.CachedInfo().Config.Name, seq, g.t.EventsSubject(session))
	if err != nil || !ok || m.Sequence != seq {
		return schema.Event{}, false, err
	}
	ev, err := schema.DecodeEvent(m.Data)
	if err != nil {
		return schema.Event{}, false, schema.Errorf(schema.CodeCorruptHistory, "session %s seq %d: %v", session, seq, err)
	}
	ev.Seq = seq
	return ev, true, nil
}

// apiPrefix is the JetStream API prefix of the topology's JetStream
// context.
func (g *Gateway) apiPrefix() string {
	o := g.t.JS.Options()
	switch {
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return "$JS.API."
}
