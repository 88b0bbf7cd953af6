// Room on the session log: a call is refused before anything of it is
// spent when the log could not record it to its result.

package worker

import (
	"encoding/json"
	"fmt"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
)

// callEnvelope bounds what a tool.call takes besides its arguments: the
// event's envelope, its ids and operation (each field at most 1,024
// bytes) and a retry's link with its review.
const callEnvelope = 16 << 10

// resultEnvelope bounds what a tool.result takes besides its output: the
// event's envelope and ids, and its error text (at most
// schema.MaxResultErrorBytes, each byte escaped at worst as \u00XX).
const resultEnvelope = 2<<10 + 6*schema.MaxResultErrorBytes

// outputLimit returns the output limit of a call of t.
func (r *Runtime) outputLimit(t *registered) int {
	if t.OutputLimit > 0 {
		return t.OutputLimit
	}
	return r.cfg.DefaultOutputLimit
}

// resultRoom returns the most bytes the tool.result of a call of t can
// take: what its tool.call keeps on the log for it (stream.WithCallRoom),
// so that a call whose body ran always has room for its result.
func (r *Runtime) resultRoom(t *registered) int64 {
	return int64(r.outputLimit(t)) + resultEnvelope
}

// RetryRoom returns the most room (events, bytes) a Runtime asks of a
// session log before it spends a retry plan for a call with args, whatever
// the tool's output limit, on a server whose max_payload is maxPayload:
// the call itself and what the log keeps for its start and result (never
// more than the largest event, stream.LargestEvent). The recovery worker
// refuses a plan for a session with less room (history_too_large), so a
// plan it issues is one a tool worker can record.
func RetryRoom(args json.RawMessage, maxPayload int) (events int, bytes int64) {
	return callRoomFor(args, stream.LargestEvent(maxPayload))
}

// callRoomFor is the room a call with args asks for when its result may
// take result bytes: RetryRoom's rule, and roomForCall's.
func callRoomFor(args json.RawMessage, result int64) (int, int64) {
	events, kept := stream.CallRoom(result)
	return events + 1, int64(len(args)) + callEnvelope + kept
}

// roomForCall refuses a call the session log has no room to record (its
// tool.call, and the room that call keeps for its start and result)
// before anything of it is spent: a retry's plan (a plan spent on an
// attempt that cannot reach the log would strand its call) or a count in
// jw_budget (counted for a call never recorded). A log that cannot tell
// (not a *stream.Log) is not checked. The call's size is bounded from
// above, so a call it lets through is one the log admits.
func (r *Runtime) roomForCall(t *registered, args json.RawMessage, retry bool) error {
	l, ok := r.cfg.Log.(interface{ Room() (int, int64) })
	if !ok {
		return nil
	}
	events, bytes := l.Room()
	result := r.resultRoom(t)
	if lp, ok := r.cfg.Log.(interface{ MaxPayload() int }); ok {
		// The log keeps at most its largest event for a result.
		result = min(result, stream.LargestEvent(lp.MaxPayload()))
	}
	needEvents, need := callRoomFor(args, result)
	if events < needEvents || bytes < need {
		what, left := "a call", "nothing was recorded or counted"
		if retry {
			what, left = "a retry", "the plan is left unused"
		}
		return &schema.Error{Code: schema.CodeHistoryTooLarge, Message: fmt.Sprintf("session %s has room for %d more events (%d bytes): %s needs %d events and about %d bytes (its call, and room for its start and result); %s", r.cfg.Session, events, bytes, what, needEvents, need, left)}
	}
	return nil
}
