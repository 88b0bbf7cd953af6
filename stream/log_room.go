package stream

import (
	"context"
	"fmt"

	"github.com/jingwei/jingwei/schema"
)

// A session log's byte and event limits must always leave room to record
// the result of every call already started (and a fence, the fence
// reserve): a call whose body ran and whose result cannot be recorded
// stays open under its live writer, neither answered nor assessed. So a
// Log reserves, when it appends a tool.call, room for what that call will
// still record — its start, an approval's request and answer, and its
// result — and refuses, with history_too_large and nothing written, a
// tool.call (or any other event) that would eat into the room reserved
// for calls already on the log. A call's own events draw on its
// reservation; its tool.result releases it.

// Room a tool.call reserves besides its result: tool.started,
// approval.requested and approval.granted (each well under 2 KiB: ids
// and fields of at most 1,024 bytes).
const (
	callExtraEvents = 3
	callExtraBytes  = 8 << 10
)

// callRoomKey is the context key of WithCallRoom.
type callRoomKey struct{}

// WithCallRoom returns ctx carrying the most bytes the tool.result of a
// call appended under it can take (its output limit and its envelope; a
// runtime knows the tool's output limit). A Log appending a tool.call
// under ctx reserves that much for the result, and room for the call's
// start and approval events, before it lets the call onto the log.
// Without it (or with bytes <= 0) a tool.call reserves room for the
// largest event the server accepts (its max_payload): always enough, and
// the most a result can take whatever bytes says.
func WithCallRoom(ctx context.Context, bytes int64) context.Context {
	return context.WithValue(ctx, callRoomKey{}, bytes)
}

// reservation is the room kept for the rest of one call on the log.
type reservation struct {
	events int
	bytes  int64
	// result is the part of bytes kept for the tool.result: the call's
	// other events draw on the rest only.
	result int64
}

// reservationFor returns what a tool.call appended under ctx reserves.
func (l *Log) reservationFor(ctx context.Context) reservation {
	largest := LargestEvent(int(l.t.JS.Conn().MaxPayload()))
	result, _ := ctx.Value(callRoomKey{}).(int64)
	if result <= 0 || result > largest {
		result = largest
	}
	return reservation{events: callExtraEvents + 1, bytes: result + callExtraBytes, result: result}
}

// admit checks that an event of size bytes (serialized, seq included) for
// callID fits the log together with everything reserved for other calls
// and, for a tool.call, add (its own reservation). l.mu is held.
func (l *Log) admit(callID string, size int64, add reservation) error {
	lim := l.t.cfg.Limits
	resEvents, resBytes := fenceReserve(lim)
	own := l.open[callID]
	otherEvents, otherBytes := l.reservedEvents-own.events, l.reservedBytes-own.bytes
	if l.events+1+add.events+otherEvents > lim.MaxEvents-resEvents {
		return schema.Errorf(schema.CodeHistoryTooLarge, "session %s holds %d events and keeps %d for the calls it has started: appends stop at %d (limit %d, the last %d kept for takeovers); event not written", l.session, l.events, otherEvents, lim.MaxEvents-resEvents, lim.MaxEvents, resEvents)
	}
	if l.bytes+size+add.bytes+otherBytes > lim.MaxBytes-resBytes {
		what := "this"
		if add.bytes > 0 {
			what = fmt.Sprintf("room for its result (%d bytes) and this", add.bytes)
		}
		return schema.Errorf(schema.CodeHistoryTooLarge, "session %s holds %d bytes and keeps %d for the results of the calls it has started: it would exceed %d bytes with %s %d-byte event (limit %d, the last %d kept for takeovers); event not written", l.session, l.bytes, otherBytes, lim.MaxBytes-resBytes, what, size, lim.MaxBytes, resBytes)
	}
	return nil
}

// keep updates the reservations once an event of type typ for callID,
// of size bytes, is on the log: a tool.call's reservation (add) is kept,
// a tool.result releases its call's, any other event of a call draws on
// the part of its call's reservation not kept for the result. l.mu is
// held.
func (l *Log) keep(typ, callID string, size int64, add reservation) {
	if callID == "" {
		return
	}
	switch r, ok := l.open[callID]; {
	case typ == schema.TypeCall && add.bytes > 0:
		if l.open == nil {
			l.open = make(map[string]reservation)
		}
		if ok { // the same call id again (a corrupt log): one reservation
			l.reservedEvents -= r.events
			l.reservedBytes -= r.bytes
		}
		l.open[callID] = add
		l.reservedEvents += add.events
		l.reservedBytes += add.bytes
	case !ok:
	case typ == schema.TypeResult:
		delete(l.open, callID)
		l.reservedEvents -= r.events
		l.reservedBytes -= r.bytes
	default:
		used := min(size, r.bytes-r.result)
		r.bytes -= used
		l.reservedBytes -= used
		if r.events > 1 {
			r.events--
			l.reservedEvents--
		}
		l.open[callID] = r
	}
}

// LargestEvent is the most a stored event can take on a server whose
// max_payload is maxPayload (its bytes and the seq the history adds): the
// room a tool.call keeps for its result is never more than this, whatever
// the tool's output limit.
func LargestEvent(maxPayload int) int64 { return int64(maxPayload) + int64(maxSeqOverhead+1) }

// CallRoom returns the events and bytes a tool.call appended under
// WithCallRoom(ctx, result) keeps on the log beyond itself (at most: a
// result bound over the server's max_payload is cut to it). A caller that
// must know ahead that a call will be admitted (a retry, before it spends
// its plan) checks Room against it and the call's own size.
func CallRoom(result int64) (events int, bytes int64) {
	return callExtraEvents + 1, max(result, 0) + callExtraBytes
}

// keepAwaiting reserves room for the calls of the confirmed history h
// that wait for an approval: the writer that confirmed the session
// resumes them (their approval, start and result are still to be
// written), so they keep their room under the new Log as they did under
// the one that recorded them. Their tools' output limits are not known
// here: each keeps room for the largest event. Calls open without an
// approval request are a gone writer's, assessed, never finished by this
// one. The Log is not shared yet.
func (l *Log) keepAwaiting(h []schema.Event) {
	var waiting map[string]bool
	for i := range h {
		switch ev := &h[i]; {
		case ev.ApprovalRequest != nil:
			if waiting == nil {
				waiting = make(map[string]bool)
			}
			waiting[ev.ApprovalRequest.CallID] = true
		case ev.Result != nil && waiting != nil:
			delete(waiting, ev.Result.CallID)
		}
	}
	for id := range waiting {
		l.keep(schema.TypeCall, id, 0, l.reservationFor(context.Background()))
	}
}
