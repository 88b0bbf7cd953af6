package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/stream/natsnode"
)

// Reader reads the topology's streams from the stream leader or with
// direct gets. Get it with Topology.Reader.
type Reader struct{ t *Topology }

// How session logs are read.
//
// A writer's view of the tail (Append's re-read, Fence, OpenLog, the end of
// a history to load) must be the stream leader's: a replica that lags would
// make a fence retry forever or a history look complete when it is not. So
// the tail is read with the stream's message-get API
// ($JS.API.STREAM.MSG.GET.<stream>), which only the leader answers.
//
// The body of a history is read with batched direct gets
// ($JS.API.DIRECT.GET.<stream>, up to readBatch messages per request; any
// replica may answer), from the first message up to the sequence the
// leader gave as the end. A replica that has not caught up answers short:
// the read is retried, and after readRetryFor it goes on with the leader's
// message gets, one message per request. No consumer is created, so readers
// need no consumer permissions and nothing is left behind on the server.

// readBatch is how many messages one direct-get request asks for.
const readBatch = 1000

// readBatchBytes bounds the payload of one direct-get answer.
const readBatchBytes = 4 << 20

// readRetryFor bounds how long a short direct read (a lagging replica) is
// retried before the read goes on through the leader.
const readRetryFor = 2 * time.Second

// msgGetRequest is the body of $JS.API.STREAM.MSG.GET.<stream>.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

// msgGetResponse is its answer.
type msgGetResponse struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Msg   *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// errCodeNoMessage is JSNoMessageFoundErr.
const errCodeNoMessage jetstream.ErrorCode = 10037

// leaderGet asks the leader of stream for one message (see msgGetRequest).
// ok is false when no message matches.
func (rd Reader) leaderGet(ctx context.Context, streamName string, req msgGetRequest) (*jetstream.RawStreamMsg, bool, error) {
	t := rd.t
	body, err := json.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	subj := rd.apiPrefix() + "STREAM.MSG.GET." + streamName
	var resp *nats.Msg
	if _, ok := ctx.Deadline(); ok {
		resp, err = t.JS.Conn().RequestWithContext(ctx, subj, body)
	} else {
		resp, err = t.JS.Conn().Request(subj, body, t.cfg.RequestTimeout)
	}
	if err != nil {
		return nil, false, err
	}
	// The server's answer, decoded with json v2 (about a third of
	// encoding/json's CPU; every session read and plan prepare makes one).
	var r msgGetResponse
	if err := jsonv2.Unmarshal(resp.Data, &r); err != nil {
		return nil, false, fmt.Errorf("stream: message get on %s: %w", streamName, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == errCodeNoMessage {
			return nil, false, nil
		}
		return nil, false, r.Error
	}
	if r.Msg == nil {
		return nil, false, fmt.Errorf("stream: message get on %s: empty answer", streamName)
	}
	m := &jetstream.RawStreamMsg{Subject: r.Msg.Subject, Sequence: r.Msg.Sequence, Data: r.Msg.Data, Time: r.Msg.Time, Header: nats.Header{}}
	if len(r.Msg.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(r.Msg.Header)
		if err != nil {
			return nil, false, fmt.Errorf("stream: message get on %s: headers: %w", streamName, err)
		}
		m.Header = h
	}
	return m, true, nil
}

// LeaderGet reads the first message of streamName at or after seq on
// subject from the stream's leader (a replica that lags never answers
// it); ok is false when there is none.
func (rd Reader) LeaderGet(ctx context.Context, streamName string, seq uint64, subject string) (*jetstream.RawStreamMsg, bool, error) {
	return rd.leaderGet(ctx, streamName, msgGetRequest{Seq: seq, NextFor: subject})
}

// DirectBatch reads up to n messages of streamName on subject from seq on
// with one batched direct get, through the connection's shared
// subscription for such reads (no subscription per read). Any replica may
// answer: one that lags answers short, and none at or after seq is an
// empty answer, not an error; an answer that is not a whole batch is an
// error (read through the leader then).
func (rd Reader) DirectBatch(ctx context.Context, streamName, subject string, seq uint64, n int) ([]*jetstream.RawStreamMsg, error) {
	t := rd.t
	mux, err := batchMuxOf(t.JS.Conn())
	if err != nil {
		return nil, err
	}
	return mux.get(ctx, rd.apiPrefix()+"DIRECT.GET."+streamName, batchRequest{Seq: seq, NextFor: subject, Batch: n, MaxBytes: readBatchBytes}, t.cfg.RequestTimeout)
}

// APIPrefix is the JetStream API prefix of t's JetStream context, with
// its trailing dot ("$JS.API.", "$JS.<domain>.API.", or the custom prefix):
// what a raw JetStream request's subject starts with.
func (rd Reader) APIPrefix() string { return rd.apiPrefix() }

// apiPrefix is the JetStream API prefix of t's JetStream context.
func (rd Reader) apiPrefix() string {
	t := rd.t
	o := t.JS.Options()
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

// readRange calls fn, in stream order, for every message of stream on subj
// with a sequence in [from, through], and returns once the message at
// through (or the first one after it) has been seen. through must be a
// sequence the leader reported for subj: a read that comes back short of it
// is retried, then finished through the leader (see the comment at the top
// of this file). It stops at the first error fn returns.
func (rd Reader) readRange(ctx context.Context, streamName, subj string, from, through uint64, fn func(*jetstream.RawStreamMsg) error) error {
	return rd.read(ctx, streamName, subj, from, through, true, fn)
}

// read is readRange; direct false reads through the leader's message gets
// from the start.
func (rd Reader) read(ctx context.Context, streamName, subj string, from, through uint64, direct bool, fn func(*jetstream.RawStreamMsg) error) error {
	next := from
	var b interface{ NextBackOff() time.Duration }
	var shortSince time.Time
	for next <= through {
		if !direct {
			m, ok, err := rd.leaderGet(ctx, streamName, msgGetRequest{Seq: next, NextFor: subj})
			if err != nil {
				return fmt.Errorf("stream: read %s at %d: %w", subj, next, err)
			}
			if !ok || m.Sequence > through {
				return fmt.Errorf("stream: read %s: the leader has no message at %d..%d though it reported %d as the last", subj, next, through, through)
			}
			if err := fn(m); err != nil {
				return err
			}
			next = m.Sequence + 1
			continue
		}
		n, last, err := rd.directBatch(ctx, streamName, subj, next, through, fn)
		if err != nil {
			var stop errStop
			if errors.As(err, &stop) {
				return stop.err
			}
			if errors.Is(err, errBatchAnswer) || isNotAllowed(err) {
				// No batched direct gets here, or an answer not whole:
				// read through the leader.
				direct = false
				continue
			}
			return fmt.Errorf("stream: read %s at %d: %w", subj, next, err)
		}
		if n > 0 {
			next, b = last+1, nil
			continue
		}
		// Nothing at or after next on the replica that answered, though
		// the leader has through: it lags. Retry, then use the leader.
		if b == nil {
			b, shortSince = natsnode.Backoff(5*time.Millisecond, 200*time.Millisecond), time.Now()
		}
		if time.Since(shortSince) > readRetryFor {
			direct = false
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream: read %s: %w", subj, ctx.Err())
		case <-time.After(b.NextBackOff()):
		}
	}
	return nil
}

// errStop carries an error of readRange's fn out of directBatch.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// directBatch reads one batch of direct gets from next and passes the
// messages up to through to fn. It returns how many it passed and the last
// sequence passed. The batch goes through the connection's shared
// batchMux (see LoadForPlan): jetstreamext.GetBatch made a subscription
// and allocated a 65,536-slot channel for every batch, about 350 us of
// CPU per read. An answer that is not a whole batch (no batch support, a
// message lost on the way, none within the request timeout) is
// errBatchAnswer: the caller reads through the leader instead.
func (rd Reader) directBatch(ctx context.Context, streamName, subj string, next, through uint64, fn func(*jetstream.RawStreamMsg) error) (int, uint64, error) {
	t := rd.t
	mux, err := batchMuxOf(t.JS.Conn())
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", errBatchAnswer, err)
	}
	msgs, err := mux.get(ctx, rd.apiPrefix()+"DIRECT.GET."+streamName, batchRequest{Seq: next, NextFor: subj, Batch: readBatch, MaxBytes: readBatchBytes}, t.cfg.RequestTimeout)
	if err != nil {
		return 0, 0, err
	}
	n, last := 0, uint64(0)
	for _, m := range msgs {
		if m.Sequence > through {
			break
		}
		if err := fn(m); err != nil {
			return n, last, errStop{err}
		}
		n, last = n+1, m.Sequence
		if m.Sequence == through {
			break
		}
	}
	return n, last, nil
}

// isNotAllowed reports an error from a stream that does not allow direct
// gets, or a server that does not answer them (no responders).
func isNotAllowed(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// ReadSubject calls fn, in stream order, for every message on subject in
// the stream named streamName (one of the topology's, e.g.
// t.StreamName("REVIEWS")), up to the last one the stream leader holds when
// ReadSubject starts. Like Load it reads with the leader's message gets
// and batched direct gets, no consumer. It stops at the first error fn
// returns and returns it.
func (rd Reader) ReadSubject(ctx context.Context, streamName, subject string, fn func(*jetstream.RawStreamMsg) error) error {
	last, ok, err := rd.leaderGet(ctx, streamName, msgGetRequest{LastFor: subject})
	if err != nil {
		return fmt.Errorf("stream: read %s: %w", subject, err)
	}
	if !ok {
		return nil
	}
	return rd.readRange(ctx, streamName, subject, 1, last.Sequence, fn)
}
