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

	mu        sync.Mutex // held through a refresh
	next      uint64     // first events seq not read
	ansNext   uint64     // first answers seq not read
	refreshed time.Time  // when the last refresh started
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
		x = &sessionIndex{session: session, next: 1, ansNext: 1, calls: map[string]uint64{}, results: map[string]uint64{}, answers: map[string]schema.Answer{}}
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
// the last refresh, unless one started after asked.
func (x *sessionIndex) refresh(ctx context.Context, g *Gateway, asked time.Time) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.refreshed.After(asked) {
		return nil
	}
	x.refreshed = time.Now()
	evs, err := g.t.LoadFrom(ctx, x.session, x.next)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		x.next = ev.Seq + 1
		switch {
		case ev.Type == schema.TypeCall && ev.Call != nil && ev.Call.RequestID != "":
			if _, ok := x.calls[ev.Call.RequestID]; !ok {
				x.calls[ev.Call.RequestID] = ev.Seq
			}
		case ev.Type == schema.TypeResult && ev.Result != nil:
			if _, ok := x.results[ev.Result.CallID]; !ok {
				x.results[ev.Result.CallID] = ev.Seq
			}
		}
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
			if _, ok := x.answers[a.RequestID]; !ok {
				x.answers[a.RequestID] = a
			}
		}
	}
	return nil
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


