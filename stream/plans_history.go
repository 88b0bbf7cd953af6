package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/internal/side"
)

// LoadForPlan is LoadHistory in one round trip for the short histories
// plans are issued from: the stream leader's last message of the session
// (its message get, as Load reads the end) and a batched direct get of the
// session's events from the first one are asked for at once, and the
// events up to that last message are the history. A batch that comes back
// short of it (a replica behind the leader, a history longer than one
// batch) is finished as LoadHistory reads, from where it stopped; a batch
// that holds more (events appended since the leader answered) is cut
// there. So the result is what LoadHistory returns: every event up to the
// last one the leader held when LoadForPlan started, with the same limits
// (a history_too_large or corrupt_history *schema.Error), and it can be
// passed to a takeover with WithLoaded.
//
// The batch is read through one subscription per connection, shared by
// every LoadForPlan on it (reply subjects under one inbox, told apart by
// their last token), instead of a subscription made and dropped per read
// (jetstreamext.GetBatch: a SUB and an UNSUB on the server, and a
// 65,536-message channel allocated, for every batch). When the server
// does not answer batched direct gets, LoadForPlan is LoadHistory.
func (p *Plans) LoadForPlan(ctx context.Context, session string) (Loaded, error) {
	t := p.t
	if err := ValidateSession(session); err != nil {
		return Loaded{}, err
	}
	mux, err := batchMuxOf(t.JS.Conn())
	if err != nil {
		return t.Logs().LoadHistory(ctx, session)
	}
	type tailAnswer struct {
		tl  tail
		ok  bool
		err error
	}
	tails := make(chan tailAnswer, 1)
	side.Go(func() {
		tl, ok, err := t.Logs().lastMsg(ctx, session)
		tails <- tailAnswer{tl, ok, err}
	})
	streamName := t.Events.CachedInfo().Config.Name
	msgs, berr := mux.get(ctx, t.Reader().apiPrefix()+"DIRECT.GET."+streamName, batchRequest{Seq: 1, NextFor: t.Names().EventsSubject(session), Batch: readBatch, MaxBytes: readBatchBytes}, t.cfg.RequestTimeout)
	ta := <-tails
	switch {
	case ta.err != nil:
		return Loaded{}, ta.err
	case !ta.ok:
		return Loaded{}, nil // an empty or unknown session
	case berr != nil && ctx.Err() != nil:
		return Loaded{}, fmt.Errorf("stream: read %s: %w", session, ctx.Err())
	case berr != nil:
		// No batched direct gets here, or an answer lost: read as Load
		// reads.
		return t.Logs().LoadHistory(ctx, session)
	}
	end := ta.tl.seq
	var acc Loaded
	for _, m := range msgs {
		if m.Sequence > end {
			break
		}
		if err := acc.add(session, t.cfg.Limits, m); err != nil {
			return Loaded{}, err
		}
	}
	if n := len(acc.Events); n > 0 && acc.Events[n-1].Seq == end {
		return acc, nil
	}
	// Short of the leader's end: the rest as LoadHistory reads it, after
	// what the batch gave (the limits count both).
	h, st, err := t.Logs().loadAfter(ctx, session, end, acc)
	if err != nil {
		return Loaded{}, err
	}
	return Loaded{Events: h, bytes: st.bytes}, nil
}

// batchRequest is the body of a batched direct get
// ($JS.API.DIRECT.GET.<stream>, nats-server 2.11+).
type batchRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// errBatchAnswer is a batched direct get answered with something other
// than messages and an end-of-batch: no batch support, no responders, an
// error status, or messages lost on the way.
var errBatchAnswer = errors.New("stream: batched direct get not answered in full")

// batchMux sends batched direct gets of one connection with reply
// subjects under one inbox and routes each answer, by the reply subject's
// last token, to the get that asked. Its subscription has no pending
// limits, so the client never drops a message of an answer (each answer
// is bounded by readBatchBytes); a drop would still be seen (Dropped) and
// fail the gets in flight.
type batchMux struct {
	nc     *nats.Conn
	prefix string
	sub    *nats.Subscription

	mu    sync.Mutex
	next  uint64
	calls map[string]*batchCall
}

// batchMuxes holds the batchMux of each connection (*nats.Conn to
// *batchMux); closed connections' are dropped when a new one is made.
var batchMuxes sync.Map

// batchMuxMake serializes the making of batchMuxes.
var batchMuxMake sync.Mutex

// batchMuxOf returns nc's batchMux, subscribing it on first use.
func batchMuxOf(nc *nats.Conn) (*batchMux, error) {
	if m, ok := batchMuxes.Load(nc); ok {
		return m.(*batchMux), nil
	}
	batchMuxMake.Lock()
	defer batchMuxMake.Unlock()
	if m, ok := batchMuxes.Load(nc); ok {
		return m.(*batchMux), nil
	}
	batchMuxes.Range(func(k, _ any) bool {
		if k.(*nats.Conn).IsClosed() {
			batchMuxes.Delete(k)
		}
		return true
	})
	m := &batchMux{nc: nc, prefix: nc.NewInbox() + ".", calls: map[string]*batchCall{}}
	sub, err := nc.Subscribe(m.prefix+"*", m.deliver)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	m.sub = sub
	batchMuxes.Store(nc, m)
	return m, nil
}

// batchCall is one get in flight: the messages of its answer so far.
type batchCall struct {
	mu   sync.Mutex
	msgs []*jetstream.RawStreamMsg
	err  error
	done bool
	wake chan struct{} // capacity 1: the answer is complete
}

// get sends req to subj (a DIRECT.GET subject) and returns the messages of
// the answer, in order, once its end-of-batch (or "no messages") arrived.
// Any other answer, or none within timeout, is errBatchAnswer (or ctx's
// error).
func (m *batchMux) get(ctx context.Context, subj string, req batchRequest, timeout time.Duration) ([]*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	c := &batchCall{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.next++
	token := strconv.FormatUint(m.next, 36)
	m.calls[token] = c
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.calls, token)
		m.mu.Unlock()
	}()
	dropped, _ := m.sub.Dropped()
	if err := m.nc.PublishRequest(subj, m.prefix+token, body); err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("%w: no end of batch within %s", errBatchAnswer, timeout)
		case <-c.wake:
		}
		c.mu.Lock()
		msgs, err := c.msgs, c.err
		c.mu.Unlock()
		if now, _ := m.sub.Dropped(); now != dropped {
			return nil, fmt.Errorf("%w: messages dropped", errBatchAnswer)
		}
		return msgs, err
	}
}

// deliver routes a message of an answer to its get (subscription
// callback).
func (m *batchMux) deliver(msg *nats.Msg) {
	token := msg.Subject[len(m.prefix):]
	m.mu.Lock()
	c := m.calls[token]
	m.mu.Unlock()
	if c == nil {
		return // a get that gave up
	}
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.add(msg)
	done := c.done
	c.mu.Unlock()
	if done {
		// Wake the get once, when its answer is complete.
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// add takes one message of the answer (c.mu held). The server stamps
// every message of a batch with the sequence of the one it sent before
// (Nats-Last-Sequence, 0 for the first): a message lost on the way breaks
// that chain, and the get fails instead of returning a history with a
// hole.
func (c *batchCall) add(msg *nats.Msg) {
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
		switch status, desc := msg.Header.Get("Status"), msg.Header.Get("Description"); {
		case status == "204" && desc == "EOB":
			c.done = true // the end, or the batch's size or byte limit
		case status == "404" && len(c.msgs) == 0:
			c.done = true // no messages at or after the start
		default:
			c.done, c.err = true, fmt.Errorf("%w: status %s %s", errBatchAnswer, status, desc)
		}
		return
	}
	seq, serr := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	prev, perr := strconv.ParseUint(msg.Header.Get("Nats-Last-Sequence"), 10, 64)
	var want uint64
	if n := len(c.msgs); n > 0 {
		want = c.msgs[n-1].Sequence
	}
	switch {
	case serr != nil || perr != nil || msg.Header.Get("Nats-Num-Pending") == "":
		// Not a batch answer (a server without batched direct gets
		// answers one message).
		c.done, c.err = true, fmt.Errorf("%w: not a batch answer", errBatchAnswer)
	case prev != want || seq <= want:
		c.done, c.err = true, fmt.Errorf("%w: message after seq %d says it follows %d", errBatchAnswer, want, prev)
	default:
		c.msgs = append(c.msgs, &jetstream.RawStreamMsg{Subject: msg.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: msg.Header, Data: msg.Data})
	}
}

// ExtendLoaded returns l, a history of the session loaded before
// (LoadHistory or LoadForPlan), followed by every event appended to the
// session log since, up to the last one the stream leader holds when
// ExtendLoaded starts: what LoadHistory would return now, with the limits
// counted over all of it, without reading l's events again (the log only
// grows). l must be that session's; a zero l reads the whole log (it is
// LoadHistory then).
func (p *Plans) ExtendLoaded(ctx context.Context, session string, l Loaded) (Loaded, error) {
	t := p.t
	if err := ValidateSession(session); err != nil {
		return Loaded{}, err
	}
	var atLeast uint64
	if n := len(l.Events); n > 0 {
		atLeast = l.Events[n-1].Seq
	}
	h, st, err := t.Logs().loadAfter(ctx, session, atLeast, l)
	if err != nil {
		return Loaded{}, err
	}
	return Loaded{Events: h, bytes: st.bytes}, nil
}

// LoadedRoom returns how many more events, and bytes of serialized
// history, ordinary appends may still add to a session log holding l
// before they reach the fence reserve (see the package documentation):
// what Log.Room says to a writer whose log holds l. A recovery worker
// checks it before it issues a plan, whose attempt must fit.
func (p *Plans) LoadedRoom(l Loaded) (events int, bytes int64) {
	t := p.t
	lim := t.cfg.Limits
	resEvents, resBytes := fenceReserve(lim)
	return max(lim.MaxEvents-resEvents-len(l.Events), 0), max(lim.MaxBytes-resBytes-l.bytes, 0)
}
