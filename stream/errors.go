package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrFenced is returned by Log.Append (and OpenLog/Fence) once a writer
	// with a higher epoch, or another owner at the same epoch, has taken the
	// session over. It is permanent: the Log never writes again.
	ErrFenced = errors.New("stream: session fenced by a newer writer")

	// ErrConflict is returned by Log.Append when another message reached the
	// session log first and it is not evidence of a takeover (same epoch and
	// owner, but not this Log's event). Nothing was written; the Log keeps
	// refusing until it is reopened.
	ErrConflict = errors.New("stream: session log changed under the writer")

	// ErrLeaseHeld is returned by AcquireLease when another owner holds the
	// session's lease.
	ErrLeaseHeld = errors.New("stream: lease held by another owner")

	// ErrHoldLost is what a Hold's Err and a GuardedLog's appends return
	// once the hold can no longer be trusted: the lease was lost or could
	// not be renewed within its TTL by the local clock, or the log was
	// fenced. It comes wrapped with ErrFenced, so a runtime stops writing
	// for good.
	ErrHoldLost = errors.New("stream: session hold lost")

	// ErrLeaseLost is returned by Lease.Renew and Lease.Release when the
	// lease expired or was taken over since it was last renewed.
	ErrLeaseLost = errors.New("stream: lease lost")

	// ErrTopologyConflict is returned by EnsureTopology when a stream or
	// bucket exists with a configuration that conflicts with jingwei's.
	// Nothing is replaced or purged.
	ErrTopologyConflict = errors.New("stream: existing stream conflicts with jingwei's topology")

	// ErrNoTopology is returned by OpenTopology when a stream or bucket of
	// jingwei's topology does not exist (nothing has run on the server yet,
	// or another prefix is in use).
	ErrNoTopology = errors.New("stream: jingwei topology not found")

	// ErrLogClosed is returned by Fence and FenceLoad for a session log
	// that holds the most events a history may (schema.MaxHistoryEvents):
	// there is no room even for a fence. Writers stop appending before the
	// fence reserve (see the package documentation), so such a log can no
	// longer change: its Load is a confirmed history without a fence.
	ErrLogClosed = errors.New("stream: session log is full")

	// ErrEpochExhausted is returned by AcquireLease when the session's epoch
	// is already at schema.MaxEpoch (2^53-1): only a corrupt log or counter
	// gets there, and the epoch must never wrap around.
	ErrEpochExhausted = errors.New("stream: session epoch at its limit")

	// ErrInvalidEpoch is returned by OpenLog and Fence for epoch 0 or an
	// epoch above schema.MaxEpoch.
	ErrInvalidEpoch = errors.New("stream: invalid epoch")

	// ErrInvalidSession is returned for a session id that is not 1–128 bytes
	// of [A-Za-z0-9_-].
	ErrInvalidSession = errors.New("stream: invalid session id")
)

// ConflictError says which stream or bucket conflicts and how. It matches
// ErrTopologyConflict under errors.Is.
type ConflictError struct {
	// Stream is the stream (or the bucket's stream, KV_<bucket>) name.
	Stream string
	// Field names the conflicting setting, e.g. "subjects" or "retention".
	Field string
	// Have and Want are the existing and the required values.
	Have, Want string
	// Repair, when set, is a command that mends the stream in place (the
	// nats CLI; `jingwei serve --repair-topology` does the same); empty
	// when only removing the stream by hand would do.
	Repair string
}

// Error describes the conflict and how to repair it.
func (e *ConflictError) Error() string {
	if e.Repair != "" {
		return fmt.Sprintf("stream: existing stream %s has %s %s, jingwei needs %s (refused: the setting is weaker than jingwei's guarantees need; repair it with: %s, or run jingwei serve --repair-topology)", e.Stream, e.Field, e.Have, e.Want, e.Repair)
	}
	return fmt.Sprintf("stream: existing stream %s has %s %s, jingwei needs %s (not changed; fix or remove it by hand)", e.Stream, e.Field, e.Have, e.Want)
}

// Is matches ErrTopologyConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrTopologyConflict }

// Sentinel errors of the plan store; match them with errors.Is.
var (
	// ErrPlanNotIssued is returned when no plan with that id was issued in
	// jw_plans.
	ErrPlanNotIssued = errors.New("stream: plan not issued")
	// ErrPlanConsumed is returned when the plan was already used by an
	// attempt (in this or any other process).
	ErrPlanConsumed = errors.New("stream: plan already consumed")
	// ErrPlanConflict is returned by Issue when a different plan is already
	// stored under the same plan id.
	ErrPlanConflict = errors.New("stream: a different plan is stored under this plan id")
)

// ErrInvalidBudgetKey is returned for a session or task that cannot be part
// of a jw_budget key: both must be 1–128 bytes of [A-Za-z0-9_-].
var ErrInvalidBudgetKey = errors.New("stream: invalid budget key")

// errForeignAck is an acknowledgement that did not come from the session
// log's stream.
var errForeignAck = errors.New("stream: acknowledgement from another stream")

// errReleased is why a released hold ended.
var errReleased = errors.New("released")

// Transient reports whether err is a failure of the infrastructure that
// passes by itself, after which the same request may be sent again: a
// JetStream API error with status 503 (no quorum, a stream leader being
// elected, JetStream not ready yet), 408 or 504, or 10158 ("duplicate
// message id is in process": a publish of the same Msg-Id is still being
// stored on a replicated stream, so a re-send is acknowledged as its
// duplicate); a request that timed out (nats.ErrTimeout,
// context.DeadlineExceeded of one request); no responders; a connection
// that is reconnecting or disconnected; JetStream not enabled yet. Writers
// that retry on it make the re-send safe (a Msg-Id, an expected sequence
// or revision); such an error is never turned into a refusal of a call.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 || apiErr.Code == 408 || apiErr.Code == 504 || apiErr.ErrorCode == jsErrDuplicateInProcess
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// jsErrDuplicateInProcess is JetStream's error code for a message whose
// Msg-Id another publish is still storing.
const jsErrDuplicateInProcess jetstream.ErrorCode = 10158
