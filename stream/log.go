package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jingwei/jingwei/internal/pause"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Headers jingwei puts on every session-log message, so a writer can tell
// whose message the tail is without decoding it.
const (
	// HeaderEpoch carries the writer's epoch (decimal).
	HeaderEpoch = "Jw-Epoch"
	// HeaderOwner carries the writer's owner id.
	HeaderOwner = "Jw-Owner"
)

// appendRetryFor bounds how long Append keeps re-sending after transport
// errors, a missing stream leader or an in-flight conflict (a cluster
// election takes several seconds), unless ctx ends first.
const appendRetryFor = 15 * time.Second

// maxSeqOverhead is what a seq adds to an event when it is serialized for a
// history ("seq":N, with N up to 20 digits); Append counts it in full so that
// whatever it accepts, Load accepts.
const maxSeqOverhead = len(`"seq":,`) + 20

// Log is one writer's handle on one session log at one epoch. Appends are
// serialized; it is safe for concurrent use. Once it returns ErrFenced or
// ErrConflict it refuses every further append.
type Log struct {
	t       *Topology
	session string
	owner   string
	subject string
	epoch   uint64
	idPre   string

	mu     sync.Mutex
	last   uint64 // stream sequence of the last message on the subject
	events int
	bytes  int64
	n      uint64
	err    error

	// open holds the room reserved for the rest of each call this Log
	// appended and has not seen the result of (log_room.go), and
	// reservedEvents, reservedBytes their sums.
	open           map[string]reservation
	reservedEvents int
	reservedBytes  int64
}

// Session returns the session id.
func (l *Log) Session() string { return l.session }

// Owner returns the writer's owner id.
func (l *Log) Owner() string { return l.owner }

// Epoch returns the writer's epoch, stamped on every event it appends.
func (l *Log) Epoch() uint64 { return l.epoch }

// EventAt returns the event stored at stream sequence seq of the session
// log, read from the stream leader. ok is false when seq holds no message
// of this session; a message there that does not decode is an error.
func (l *Log) EventAt(ctx context.Context, seq uint64) (ev schema.Event, ok bool, err error) {
	m, ok, err := l.t.Reader().leaderGet(ctx, l.t.Events.CachedInfo().Config.Name, msgGetRequest{Seq: seq, NextFor: l.subject})
	if err != nil || !ok || m.Sequence != seq {
		return schema.Event{}, false, err
	}
	if ev, err = schema.DecodeEvent(m.Data); err != nil {
		return schema.Event{}, false, fmt.Errorf("stream: event %d of %s: %w", seq, l.session, err)
	}
	ev.Seq = seq
	return ev, true, nil
}

// LastSeq returns the stream sequence of the last message on the session
// log as far as this writer knows (0 for an empty log).
func (l *Log) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Room returns how many more events, and bytes of serialized history,
// ordinary appends may still add to the session log before they reach the
// fence reserve (see the package documentation) or the room kept for the
// calls this Log started (WithCallRoom), as far as this writer knows. A
// caller that must not start what it cannot record (a retry: its call,
// start and result) checks it first.
// MaxPayload is the largest message the log's server accepts: no event
// is larger, and no call keeps more room for its result
// (LargestEvent).
func (l *Log) MaxPayload() int { return int(l.t.JS.Conn().MaxPayload()) }

func (l *Log) Room() (events int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.t.cfg.Limits
	resEvents, resBytes := fenceReserve(lim)
	return max(lim.MaxEvents-resEvents-l.events-l.reservedEvents, 0), max(lim.MaxBytes-resBytes-l.bytes-l.reservedBytes, 0)
}

// Err returns the permanent error (ErrFenced, ErrConflict) that stopped the
// Log, or nil while it can still append.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// tail is what a writer knows about a message on a session log.
type tail struct {
	seq   uint64
	epoch uint64
	owner string
	msgID string
	fence bool
	size  int
	data  []byte // the payload, for a writer to tell its own event from one under its Msg-Id
}

func (lg Logs) readMsg(m *jetstream.RawStreamMsg) tail {
	tl := tail{seq: m.Sequence, msgID: m.Header.Get(jetstream.MsgIDHeader), owner: m.Header.Get(HeaderOwner), size: len(m.Data), data: m.Data}
	if e, err := strconv.ParseUint(m.Header.Get(HeaderEpoch), 10, 64); err == nil {
		tl.epoch = e
	}
	// A message without jingwei's headers (another client's) or a fence:
	// read the payload.
	if tl.owner == "" || m.Header.Get(HeaderEpoch) == "" || len(m.Data) < 4096 {
		var ev struct {
			Epoch uint64        `json:"epoch"`
			Type  string        `json:"type"`
			Fence *schema.Fence `json:"fence"`
		}
		if json.Unmarshal(m.Data, &ev) == nil {
			if ev.Epoch > tl.epoch {
				tl.epoch = ev.Epoch
			}
			if ev.Type == schema.TypeFenced && ev.Fence != nil {
				tl.fence = true
				tl.epoch = max(tl.epoch, ev.Fence.Epoch)
				if ev.Fence.Owner != "" {
					tl.owner = ev.Fence.Owner
				}
			}
		}
	}
	return tl
}

// lastMsg returns the last message on the session log as the stream
// leader has it, ok false if the log is empty.
func (lg Logs) lastMsg(ctx context.Context, session string) (tail, bool, error) {
	t := lg.t
	m, ok, err := t.Reader().leaderGet(ctx, t.Events.CachedInfo().Config.Name, msgGetRequest{LastFor: t.Names().EventsSubject(session)})
	if err != nil {
		return tail{}, false, fmt.Errorf("stream: read tail of %s: %w", session, err)
	}
	if !ok {
		return tail{}, false, nil
	}
	return lg.readMsg(m), true, nil
}

// nextMsg returns the first message on the session log at or after seq, as
// the stream leader has it.
func (lg Logs) nextMsg(ctx context.Context, session string, seq uint64) (tail, bool, error) {
	t := lg.t
	m, ok, err := t.Reader().leaderGet(ctx, t.Events.CachedInfo().Config.Name, msgGetRequest{Seq: seq, NextFor: t.Names().EventsSubject(session)})
	if err != nil {
		return tail{}, false, fmt.Errorf("stream: read %s at %d: %w", session, seq, err)
	}
	if !ok {
		return tail{}, false, nil
	}
	return lg.readMsg(m), true, nil
}

// HighestEpoch returns the highest epoch on the session log (0 for an empty
// log). Epochs on a log never decrease, so it is the tail's epoch.
func (lg Logs) HighestEpoch(ctx context.Context, session string) (uint64, error) {
	if err := ValidateSession(session); err != nil {
		return 0, err
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil || !ok {
		return 0, err
	}
	return tl.epoch, nil
}

// supersedes reports whether a message by (epoch, owner) fences a writer at
// (myEpoch, me).
func supersedes(epoch uint64, owner string, myEpoch uint64, me string) bool {
	return epoch > myEpoch || epoch == myEpoch && owner != "" && owner != me
}

// OpenLog returns a writer's Log on the session at the given epoch,
// positioned at the log's current tail. It returns ErrFenced if the log
// already holds a newer epoch (or the same epoch by another owner). OpenLog
// does not fence older writers: a takeover uses Fence.
func (lg Logs) OpenLog(ctx context.Context, session, owner string, epoch uint64) (*Log, error) {
	t := lg.t
	if err := ValidateSession(session); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, errors.New("stream: OpenLog: empty owner")
	}
	if epoch == 0 || epoch > schema.MaxEpoch {
		return nil, fmt.Errorf("%w: %d (want 1 to %d)", ErrInvalidEpoch, epoch, uint64(schema.MaxEpoch))
	}
	tl, ok, err := lg.lastMsg(ctx, session)
	if err != nil {
		return nil, err
	}
	if ok && tl.epoch > schema.MaxEpoch {
		return nil, corruptEpoch(session, tl)
	}
	if ok && supersedes(tl.epoch, tl.owner, epoch, owner) {
		return nil, fmt.Errorf("%w: session %s is at epoch %d (owner %q), writer has epoch %d", ErrFenced, session, tl.epoch, tl.owner, epoch)
	}
	l := &Log{t: t, session: session, owner: owner, subject: t.Names().EventsSubject(session), epoch: epoch, idPre: nuid.Next() + "-"}
	if ok {
		st, err := lg.measure(ctx, session, tl.seq)
		if err != nil {
			return nil, err
		}
		l.last, l.events, l.bytes = tl.seq, st.events, st.bytes
	}
	return l, nil
}

// Fence takes the session over at epoch: it appends a session.fenced event
// {epoch, owner} after whatever the log holds and returns the new writer's
// Log. While an older writer keeps appending, Fence re-reads the tail and
// tries again until it is in; from then on every writer with a lower epoch
// gets ErrFenced. It returns ErrFenced if the log already holds a newer
// epoch or the same epoch by another owner. The fence event is written even
// if the history is at its limits: stopping the old writer comes first.
func (lg Logs) Fence(ctx context.Context, session, owner string, epoch uint64) (*Log, error) {
	l, _, err := lg.FenceLoad(ctx, session, owner, epoch)
	return l, err
}

// FenceLoad is Fence that also returns the confirmed history: the session's
// whole log up to and including the fence event, read after the fence is
// in (LoadThrough), so nothing the old writer wrote can be missing from it.
// It is what a takeover needs, in one read of the log.
func (lg Logs) FenceLoad(ctx context.Context, session, owner string, epoch uint64) (*Log, []schema.Event, error) {
	l, h, _, _, err := lg.fenceLoad(ctx, session, owner, epoch, Loaded{}, false)
	return l, h, err
}

// fenceLoad is FenceLoad after a history loaded before (prefix): only what
// follows it is read once the fence is in. With resume, a log whose last
// event is already (epoch, owner)'s is loaded without a fence: resumed is
// true, and fenceSeq is that event's sequence instead of the fence's.
func (lg Logs) fenceLoad(ctx context.Context, session, owner string, epoch uint64, prefix Loaded, resume bool) (l *Log, h []schema.Event, fenceSeq uint64, resumed bool, err error) {
	t := lg.t
	if err := ValidateSession(session); err != nil {
		return nil, nil, 0, false, err
	}
	if owner == "" {
		return nil, nil, 0, false, errors.New("stream: Fence: empty owner")
	}
	if epoch == 0 || epoch > schema.MaxEpoch {
		return nil, nil, 0, false, fmt.Errorf("%w: %d (want 1 to %d)", ErrInvalidEpoch, epoch, uint64(schema.MaxEpoch))
	}
	// A fence is one attempt after the tail as the leader has it: read the
	// tail, publish the fence after it, and on a refusal (a message got in
	// between) read the tail again at once. An old writer appending back to
	// back takes a turn per round trip, and a fence that slept between its
	// attempts or re-read more than the tail lost nearly every race: it
	// could take seconds, or a whole history, to get in. Waits are only for
	// transport errors (the answer of such an attempt is the tail: a fence
	// stored without its acknowledgement is found there by its Msg-Id) and
	// for a refusal after which the tail has not moved.
	b := natsnode.Backoff(time.Millisecond, 100*time.Millisecond)
	idPre := nuid.Next() + "-"
	fenceID := idPre + "fence"
	var counted bool
	var count int        // the subject's messages, counted at or after countedAt
	var countedAt uint64 // the tail's sequence when counted
	var refused struct { // the last refused attempt
		ok  bool
		seq uint64 // the tail it was published after
	}
	for {
		tl, ok, err := lg.lastMsg(ctx, session)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if refused.ok && tl.seq == refused.seq {
			// Refused, yet the leader's tail has not moved: a write still
			// in flight. Wait instead of spinning on it.
			if err := pause.For(ctx, b.NextBackOff()); err != nil {
				return nil, nil, 0, false, err
			}
			refused.ok = false
			continue
		}
		if ok && tl.epoch > schema.MaxEpoch {
			return nil, nil, 0, false, corruptEpoch(session, tl)
		}
		if ok && tl.msgID == fenceID {
			// An attempt whose answer was lost is in, and nothing followed.
			l := &Log{t: t, session: session, owner: owner, subject: t.Names().EventsSubject(session), epoch: epoch, idPre: idPre}
			return lg.fenced(ctx, l, tl.seq, prefix)
		}
		if ok && supersedes(tl.epoch, tl.owner, epoch, owner) {
			return nil, nil, 0, false, fmt.Errorf("%w: session %s is at epoch %d (owner %q), fence has epoch %d", ErrFenced, session, tl.epoch, tl.owner, epoch)
		}
		if ok && resume && tl.epoch == epoch && tl.owner == owner {
			// The log ends with this writer's own event: it fenced the
			// session at this epoch before, and every later writer would
			// have had to append after it. Nothing to fence.
			h, st, err := lg.loadAfter(ctx, session, tl.seq, prefix)
			if err != nil {
				return nil, nil, 0, false, err
			}
			// Appends go after the event checked to be ours: should
			// anything have followed it meanwhile, the first append
			// finds out (fenced, or a conflict).
			l := &Log{t: t, session: session, owner: owner, subject: t.Names().EventsSubject(session), epoch: epoch, idPre: idPre, last: tl.seq}
			l.events, l.bytes = st.events, st.bytes
			l.keepAwaiting(h)
			return l, h, tl.seq, true, nil
		}
		// A log with no room left even for a fence is closed: nothing more
		// can be appended to it by anyone, so it stands confirmed as it is
		// (see ErrLogClosed). The subject gains at most one message per
		// stream sequence, so after the first count it is counted again
		// only when that bound reaches the limit.
		if ok && (!counted || count+int(tl.seq-countedAt)+1 > t.cfg.Limits.MaxEvents) {
			if count, err = lg.subjectCount(ctx, session); err != nil {
				return nil, nil, 0, false, err
			}
			counted, countedAt = true, tl.seq
			if count+1 > t.cfg.Limits.MaxEvents {
				return nil, nil, 0, false, fmt.Errorf("%w: session %s holds %d events (limit %d)", ErrLogClosed, session, count, t.cfg.Limits.MaxEvents)
			}
		}
		// Limits are measured once the fence is in (the read would only
		// give an older writer more time to get in between).
		l := &Log{t: t, session: session, owner: owner, subject: t.Names().EventsSubject(session), epoch: epoch, idPre: idPre, last: tl.seq}
		seq, err := l.publishFence(ctx, fenceID)
		switch {
		case err == nil:
			return lg.fenced(ctx, l, seq, prefix)
		case errors.Is(err, ErrConflict):
			refused.ok, refused.seq = true, tl.seq
			continue // an older writer got in first: the new tail, at once
		case ctx.Err() != nil:
			return nil, nil, 0, false, ctx.Err()
		case !Transient(err) && !errors.Is(err, errForeignAck):
			return nil, nil, 0, false, err
		}
		if err := pause.For(ctx, b.NextBackOff()); err != nil {
			return nil, nil, 0, false, err
		}
	}
}

// corruptEpoch is the error for a session log whose last message carries
// an epoch over schema.MaxEpoch: no history reader accepts it (its epoch
// is corrupt_history, §14) and no writer can fence above it, so the log
// can never be confirmed or written again. It is corrupt_history, an
// answer every request of the session gets — not a fence by a newer
// writer to wait out.
func corruptEpoch(session string, tl tail) error {
	return &schema.Error{Code: schema.CodeCorruptHistory, Message: fmt.Sprintf("session %s: message %d carries epoch %d, over the limit %d", session, tl.seq, tl.epoch, uint64(schema.MaxEpoch)), Err: ErrInvalidEpoch}
}

// fenced loads into l, the new writer, the history through its fence at
// seq.
func (lg Logs) fenced(ctx context.Context, l *Log, seq uint64, prefix Loaded) (*Log, []schema.Event, uint64, bool, error) {
	h, st, err := lg.loadAfter(ctx, l.session, seq, prefix)
	if err != nil {
		return nil, nil, 0, false, err
	}
	l.last = seq
	l.events, l.bytes = st.events, st.bytes
	l.keepAwaiting(h)
	return l, h, seq, false, nil
}

// publishFence sends the fence event with Msg-Id id once, expecting l.last
// at the tail. A refusal because another message is there is ErrConflict;
// an acknowledgement from another stream is errForeignAck; a transport
// error is returned as it is (the fence may be stored: the tail says).
func (l *Log) publishFence(ctx context.Context, id string) (uint64, error) {
	ev := schema.Event{V: schema.Version, Session: l.session, Epoch: l.epoch, At: time.Now().UTC(), Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: l.epoch, Owner: l.owner}}
	payload, err := schema.EncodeEvent(ev)
	if err != nil {
		return 0, err
	}
	msg := l.message()
	defer func() {
		msg.Data = nil
		appendMsgs.Put(msg)
	}()
	msg.Data = payload
	msg.Header[jetstream.MsgIDHeader][0] = id
	msg.Header[jetstream.ExpectedLastSubjSeqHeader][0] = strconv.FormatUint(l.last, 10)
	if tracing.Inject(ctx, msg.Header) {
		defer tracing.Clear(msg.Header)
	}
	want := l.t.Events.CachedInfo().Config.Name
	actx, cancel := context.WithTimeout(ctx, l.t.cfg.RequestTimeout)
	defer cancel()
	stream, seq, err := publishAck(actx, l.t.JS.Conn(), msg, want)
	switch {
	case err == nil && stream != want:
		return 0, fmt.Errorf("%w: from stream %q", errForeignAck, stream)
	case isWrongLastSeq(err):
		return 0, fmt.Errorf("%w: session %s: a message follows %d: %v", ErrConflict, l.session, l.last, err)
	}
	return seq, err
}

// fenceReserve is the room at the end of a history that only
// session.fenced events may use: a thousandth of the event limit (100 of
// 100,000) and a 256th of the byte limit (64 KiB of 16 MiB; a fence is
// well under 1 KiB, so the bytes never run out before the events). Writers
// stop appending where the reserve starts, so a full session can still be
// taken over (fenced, loaded, inspected, refused) that many times.
func fenceReserve(lim schema.Limits) (events int, bytes int64) {
	return lim.MaxEvents / 1000, lim.MaxBytes / 256
}

// subjectCount returns how many messages the session log holds, as the
// stream counts them.
func (lg Logs) subjectCount(ctx context.Context, session string) (int, error) {
	t := lg.t
	subj := t.Names().EventsSubject(session)
	info, err := t.Events.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("stream: count %s: %w", session, err)
	}
	return int(info.State.Subjects[subj]), nil
}

// eventSize is the size an event takes in a serialized history: its stored
// payload, its "seq":N, member and a newline.
func eventSize(payload int, seq uint64) int64 {
	return int64(payload + len(`"seq":,`) + len(strconv.FormatUint(seq, 10)) + 1)
}

// Append stamps the event with schema version, session, epoch and (if zero)
// the time, and appends it to the session log after the last message this
// writer knows of. It returns the event's stream sequence.
//
// If another message got there first, Append re-reads the log: its own
// event (a publish whose acknowledgement was lost) counts as appended; a
// message from a newer epoch, or the same epoch by another owner, returns
// ErrFenced; anything else ErrConflict. Both are permanent for this Log. An
// event that would take the history over its limits, or into the room
// kept for the calls this Log started (a tool.call keeps room for its
// start and result: WithCallRoom), is refused with a history_too_large
// *schema.Error and nothing is written; the Log stays usable.
func (l *Log) Append(ctx context.Context, ev schema.Event) (uint64, error) {
	return l.append(ctx, ev, time.Time{})
}

// AppendFor is Append for an event that must be written even if its
// caller goes away (a tool.result after the caller's context ended): it
// runs under ctx's values but not its cancellation, and gives up once d
// has passed (d <= 0: at once), with an error matching
// context.DeadlineExceeded, as Append under
// context.WithTimeout(context.WithoutCancel(ctx), d) would. It costs one
// timer per publish, as Append does, instead of a context of its own and
// the publish's context registered with it.
func (l *Log) AppendFor(ctx context.Context, ev schema.Event, d time.Duration) (uint64, error) {
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx) // a context that never ends (Background) is kept as it is
	}
	return l.append(ctx, ev, time.Now().Add(d))
}

// append is Append that also ends at until (zero: only when ctx ends).
func (l *Log) append(ctx context.Context, ev schema.Event, until time.Time) (uint64, error) {
	if ev.Type == "" {
		return 0, errors.New("stream: Append: event has no type")
	}
	ev.V = schema.Version
	ev.Seq = 0
	ev.Session = l.session
	ev.Epoch = l.epoch
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	// AppendEvent validates too (required fields, field lengths, valid
	// JSON): an invalid event is refused with its *schema.Error and
	// nothing is written, without waiting for an append in flight.
	buf := payloadBufs.Get().(*[]byte)
	payload, err := schema.AppendEvent((*buf)[:0], &ev)
	if err != nil {
		payloadBufs.Put(buf)
		return 0, fmt.Errorf("stream: append to %s: %w", l.session, err)
	}
	defer func() {
		if cap(payload) <= maxPooledPayload {
			*buf = payload[:0]
			payloadBufs.Put(buf)
		}
	}()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	size := int64(len(payload) + maxSeqOverhead + 1)
	callID := ev.CallID()
	var add reservation
	if ev.Type == schema.TypeCall {
		add = l.reservationFor(ctx)
	}
	if err := l.admit(callID, size, add); err != nil {
		return 0, err
	}

	l.n++
	seq, err := l.send(ctx, payload, l.idPre+strconv.FormatUint(l.n, 10), until)
	if err == nil {
		l.keep(ev.Type, callID, eventSize(len(payload), seq), add)
	}
	return seq, err
}

// payloadBufs holds the buffers appends encode their events into: a
// publish copies the payload into the connection's buffer before it
// returns, and nothing else keeps it (resolve reads the log, appended
// only its length), so the buffer is reused once the append returns.
// Buffers grown beyond maxPooledPayload (a large output) are dropped.
var payloadBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 1024)
	return &b
}}

// maxPooledPayload is the largest buffer payloadBufs keeps.
const maxPooledPayload = 64 << 10

// appendMsgs holds the messages appends are sent in, each with the
// headers every append carries (Jw-Epoch, Jw-Owner, Nats-Msg-Id,
// Nats-Expected-Last-Subject-Sequence) already in its header map, so an
// append only sets their values: a message and its map made per append
// were a third of the wrapper's allocations, and one kept per Log cost
// ~900 bytes per held session (the fleet's memory-per-session row).
var appendMsgs = sync.Pool{New: func() any {
	return &nats.Msg{Header: nats.Header{
		HeaderEpoch:                         {""},
		HeaderOwner:                         {""},
		jetstream.MsgIDHeader:               {""},
		jetstream.ExpectedLastSubjSeqHeader: {""},
	}}
}}

// message returns a message from appendMsgs for l's subject with l's
// epoch and owner; the caller puts it back once its publish returned (a
// publish copies the message into the connection's buffer before it
// returns).
func (l *Log) message() *nats.Msg {
	m := appendMsgs.Get().(*nats.Msg)
	m.Subject = l.subject
	m.Header[HeaderEpoch][0] = strconv.FormatUint(l.epoch, 10)
	m.Header[HeaderOwner][0] = l.owner
	return m
}

// send publishes payload with Msg-Id id after l.last, re-sending after
// transport errors and resolving refusals through the log (see resolve),
// until ctx ends or, if it is not zero, until passes. l.mu is held.
func (l *Log) send(ctx context.Context, payload []byte, id string, until time.Time) (uint64, error) {
	// The headers jetstream.WithMsgID and WithExpectLastSequencePerSubject
	// would set, set directly on the pooled message: the same bytes on the
	// wire without the options' allocations.
	msg := l.message()
	msg.Data = payload
	msg.Header[jetstream.MsgIDHeader][0] = id
	defer func() {
		msg.Data = nil
		appendMsgs.Put(msg)
	}()
	// trace context in headers only, never in the event; Enabled (inlined)
	// first, so nothing is called while tracing is off
	if tracing.Enabled() && tracing.Inject(ctx, msg.Header) {
		defer tracing.Clear(msg.Header)
	}

	// ended is ctx's error, or DeadlineExceeded once until has passed.
	ended := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !until.IsZero() && !time.Now().Before(until) {
			return context.DeadlineExceeded
		}
		return nil
	}
	// attempt bounds one request: RequestTimeout, and no later than until.
	attempt := func() time.Duration {
		if until.IsZero() {
			return l.t.cfg.RequestTimeout
		}
		return min(l.t.cfg.RequestTimeout, time.Until(until))
	}

	var b *backoff.ExponentialBackOff // made on the first retry only
	var firstErr time.Time
	// AppendFor's context never ends: its attempts need no context of
	// their own, the request is bounded by its timeout alone. (Append
	// keeps one per attempt, as before, whatever its context.)
	endless := !until.IsZero() && ctx.Done() == nil
	for {
		msg.Header[jetstream.ExpectedLastSubjSeqHeader][0] = strconv.FormatUint(l.last, 10)
		want := l.t.Events.CachedInfo().Config.Name
		var stream string
		var seq uint64
		var err error
		if d := attempt(); endless && d > 0 {
			stream, seq, err = publishAckWithin(l.t.JS.Conn(), msg, want, d)
		} else {
			actx, cancel := context.WithTimeout(ctx, d)
			stream, seq, err = publishAck(actx, l.t.JS.Conn(), msg, want)
			cancel()
		}
		if err == nil && stream != want {
			// Not JW_EVENTS's answer (a reply forged by another client):
			// the log itself says whether the event is in.
			err = fmt.Errorf("%w: from stream %q", errForeignAck, stream)
		}
		if err == nil {
			l.appended(seq, len(payload))
			return seq, nil
		}
		if end := ended(); end != nil {
			// The event may or may not be stored; the next append resolves it.
			return 0, fmt.Errorf("stream: append to %s: %w", l.session, end)
		}
		retry := false
		if isWrongLastSeq(err) || errors.Is(err, errForeignAck) {
			actx, cancel := context.WithTimeout(ctx, attempt())
			seq, done, rerr := l.resolve(actx, id, payload)
			cancel()
			switch {
			case done:
				l.appended(seq, len(payload))
				return seq, nil
			case l.err != nil:
				return 0, l.err
			case rerr != nil: // the re-read failed (no leader, timeout)
				err, retry = rerr, Transient(rerr)
			default:
				retry = true // nothing new on the log yet: a write in flight
			}
		} else if Transient(err) {
			retry = true
		}
		if b == nil {
			b = natsnode.Backoff(5*time.Millisecond, 250*time.Millisecond)
			firstErr = time.Now()
		}
		if !retry || time.Since(firstErr) > appendRetryFor {
			return 0, fmt.Errorf("stream: append to %s: %w", l.session, err)
		}
		l.t.log.Debug().Err(err).Str("session", l.session).Msg("append: retrying")
		wait := b.NextBackOff()
		if !until.IsZero() {
			wait = min(wait, time.Until(until))
		}
		_ = pause.For(ctx, wait) // ended says why it stopped
		if end := ended(); end != nil {
			return 0, fmt.Errorf("stream: append to %s: %w", l.session, end)
		}
	}
}

func (l *Log) appended(seq uint64, payload int) {
	l.last = seq
	l.events++
	l.bytes += eventSize(payload, seq)
}

// resolve runs after a wrong-last-sequence refusal and reads the log
// forward from the writer's last known message. Events of this Log whose
// acks were lost earlier (an append cancelled mid-flight) are taken into
// account as they are met. done is true if the event with Msg-Id id and
// this payload is there, or an earlier message of this Log with the same
// payload (the same event appended again after an append that ended
// unanswered): the append happened, its ack was lost. Msg-Ids
// are predictable (the prefix is on every event the Log stored), so a
// message under id with another payload is someone else's (taking it for
// this append's would let a forged event stand in for a tool.started the
// Log then acts on). A message by anyone else
// stops the Log with ErrFenced or ErrConflict (returned as err). If nothing
// (more) follows yet — a replicated write still in flight — all are zero
// and the caller re-sends.
func (l *Log) resolve(ctx context.Context, id string, payload []byte) (seq uint64, done bool, err error) {
	for {
		next, ok, err := l.t.Logs().nextMsg(ctx, l.session, l.last+1)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			return 0, false, nil
		}
		// This append (id has the prefix), or this very event appended
		// before by this Log and its answer lost (a tool.result the
		// runtime retries): it is in.
		if strings.HasPrefix(next.msgID, l.idPre) && bytes.Equal(next.data, payload) {
			return next.seq, true, nil
		}
		if next.msgID != id && strings.HasPrefix(next.msgID, l.idPre) {
			l.appended(next.seq, next.size)
			continue
		}
		last, _, err := l.t.Logs().lastMsg(ctx, l.session)
		if err != nil {
			return 0, false, err
		}
		for _, m := range []tail{next, last} {
			if supersedes(m.epoch, m.owner, l.epoch, l.owner) {
				l.err = fmt.Errorf("%w: session %s has epoch %d (owner %q) at seq %d; writer had epoch %d", ErrFenced, l.session, m.epoch, m.owner, m.seq, l.epoch)
				return 0, false, l.err
			}
		}
		l.err = fmt.Errorf("%w: session %s: seq %d (epoch %d, owner %q) follows %d", ErrConflict, l.session, next.seq, next.epoch, next.owner, l.last)
		return 0, false, l.err
	}
}

// isWrongLastSeq reports a refused expected-last-subject-sequence.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}
