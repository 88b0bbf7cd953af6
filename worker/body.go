// The body of an admitted call and its tool.result.

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/jingwei/jingwei/internal/pause"
	"github.com/jingwei/jingwei/schema"
)

// run executes the body and fills res.Status, Output, Error and Retryable.
func (r *Runtime) run(ctx context.Context, t *registered, req BodyRequest, timeout time.Duration, limit int, res *Result) {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type out struct {
		b   json.RawMessage
		err error
	}
	done := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- out{err: fmt.Errorf("body panicked: %v", p)}
			}
		}()
		b, err := t.Body(bctx, req)
		done <- out{b, err}
	}()
	var o out
	select {
	case o = <-done:
	case <-bctx.Done():
		select {
		case o = <-done: // finished at the same moment: its answer stands
		default:
			o.err = bctx.Err()
		}
	}
	switch {
	case o.err == nil && len(o.b) > limit:
		res.Status, res.Error = schema.StatusOutputLimit, fmt.Sprintf("output of %d bytes is over the limit of %d bytes", len(o.b), limit)
	case o.err == nil && len(o.b) > 0 && !json.Valid(o.b):
		res.Status, res.Error = schema.StatusFailed, "body returned output that is not valid JSON"
	case o.err == nil:
		res.Status, res.Output = schema.StatusOK, o.b
	case bctx.Err() != nil && (errors.Is(o.err, context.DeadlineExceeded) || errors.Is(o.err, context.Canceled) || errors.Is(o.err, bctx.Err())):
		if ctx.Err() != nil {
			res.Status = schema.StatusCancelled
		} else {
			res.Status = schema.StatusTimeout
		}
		res.Error, res.Retryable = o.err.Error(), true
	default:
		res.Status, res.Error = schema.StatusFailed, o.err.Error()
		var be *bodyError
		if errors.As(o.err, &be) {
			res.Status, res.Retryable = be.status, be.retryable
		}
	}
}

// finish appends the tool.result of res (whatever became of ctx) and returns
// res with callErr, or the append's error.
//
// The error text is cut to schema.MaxResultErrorBytes. An output the log
// refuses for good (over the server's max_payload or the room its call
// kept, or beyond what a history reader accepts) is not recorded: the
// result is recorded without it, as output_limit, so a call whose body
// ran is never left open for want of room for its output.
func (r *Runtime) finish(ctx context.Context, res Result, callErr error) (Result, error) {
	res.Error = cutText(res.Error, schema.MaxResultErrorBytes)
	err := r.appendResult(ctx, res)
	if err != nil && len(res.Output) > 0 && outputRefused(err) {
		r.cfg.Logger.Warn().Str("session", r.cfg.Session).Err(err).Str("call_id", res.CallID).Int("output_bytes", len(res.Output)).Msg("output not recordable; result recorded without it (output_limit)")
		why := cutText(fmt.Sprintf("output of %d bytes could not be recorded: %v", len(res.Output), err), schema.MaxResultErrorBytes)
		res.Status, res.Output, res.Error, res.Retryable = schema.StatusOutputLimit, nil, why, false
		callErr = &schema.Error{Code: schema.Code(res.Status), CallID: res.CallID, Message: why}
		err = r.appendResult(ctx, res)
	}
	if err != nil {
		r.cfg.Logger.Error().Str("session", r.cfg.Session).Err(err).Str("call_id", res.CallID).Str("status", string(res.Status)).Msg("tool.result not recorded")
		return res, err
	}
	return res, callErr
}

// appendResult appends the tool.result of res. An append that failed for
// a reason that may pass is tried again for Config.ResultRetryFor, while
// ctx lives and the session is not taken over: the same event each time
// (its timestamp stamped once), so a first attempt stored after all,
// its acknowledgement lost, is found on the log (stream.Log resolves it)
// and never recorded twice.
func (r *Runtime) appendResult(ctx context.Context, res Result) error {
	ev := schema.Event{Type: schema.TypeResult, At: r.cfg.Now().UTC(), Result: &schema.Result{
		CallID: res.CallID, Status: res.Status, Stage: res.Stage, Retryable: res.Retryable,
		Output: res.Output, Error: res.Error,
	}}
	_, err := r.appendOf(ctx, ev, res.Tool)
	if err == nil || r.cfg.ResultRetryFor < 0 {
		return err
	}
	until := time.Now().Add(r.cfg.ResultRetryFor)
	wait := 100 * time.Millisecond
	for err != nil && Transient(err) && !r.fenced.Load() && time.Now().Before(until) {
		r.cfg.Logger.Warn().Str("session", r.cfg.Session).Err(err).Str("call_id", res.CallID).Dur("retry_in", wait).Msg("tool.result not recorded yet; trying again")
		if pause.For(ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, 2*time.Second)
		_, err = r.appendOf(ctx, ev, res.Tool)
	}
	return err
}

// outputRefused reports an append refused for good because of what the
// event holds (its size, or a value no history reader accepts), which
// the same event without its output would not be.
func outputRefused(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, schema.ErrHistoryTooLarge) ||
		errors.Is(err, schema.ErrCorruptHistory) || errors.Is(err, schema.ErrFieldTooLong)
}

// cutText returns s cut to at most n bytes, at a UTF-8 boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
