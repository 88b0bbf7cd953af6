package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker"
)

// TestOutputTooLargeToRecordStillFinishes: a tool whose output limit is
// over the server's max_payload returns an output its tool.result cannot
// carry (the server refuses the message), and an error text of 1 MiB. The
// body ran: its call must not be left open. The result is recorded
// without the output (output_limit), its error cut to 1 KiB.
func TestOutputTooLargeToRecordStillFinishes(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("x", 3<<19) + `"`)
	rt, _, topo := liveRuntime(t, worker.Tool{OutputLimit: 4 << 20, Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		return big, nil
	}}, nil)
	res, err := rt.Call(context.Background(), "probe", nil)
	if schema.CodeOf(err) != schema.Code(schema.StatusOutputLimit) || res.Status != schema.StatusOutputLimit {
		t.Fatalf("call %s: status %s, %v; want output_limit", res.CallID, res.Status, err)
	}
	h, err := topo.Logs().Load(context.Background(), "s-live")
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Result == nil || last.Result.CallID != res.CallID || last.Result.Status != schema.StatusOutputLimit || len(last.Result.Output) != 0 {
		t.Fatalf("last event %s of %s, want the call's output_limit result without output", last.Type, last.CallID())
	}

	long := strings.Repeat("é", 1<<19)
	rt2, _, topo2 := liveRuntime(t, worker.Tool{Body: func(context.Context, worker.BodyRequest) (json.RawMessage, error) {
		return nil, errors.New(long)
	}}, nil)
	res, _ = rt2.Call(context.Background(), "probe", nil)
	h, err = topo2.Logs().Load(context.Background(), "s-live")
	if err != nil {
		t.Fatal(err)
	}
	last = h[len(h)-1]
	if last.Result == nil || last.Result.CallID != res.CallID || len(last.Result.Error) > schema.MaxResultErrorBytes || !strings.HasPrefix(long, last.Result.Error) {
		t.Fatalf("last event %s of %s, want the call's result with its error cut to %d bytes", last.Type, last.CallID(), schema.MaxResultErrorBytes)
	}
}

// tightLog is a session log with the given room left (as a *stream.Log
// reports it).
type tightLog struct {
	memLog
	bytes int64
}

func (l *tightLog) Room() (int, int64) { return 1000, l.bytes }

// TestCallWithoutRoomNotCounted: a call the session log has no room for
// (its tool.call, and the room it keeps for its start and result) is
// refused with history_too_large before anything is written, run or
// counted in the task's budget; with room it runs.
func TestCallWithoutRoomNotCounted(t *testing.T) {
	lg := &tightLog{bytes: 64 << 10}
	f := setup(t, worker.Tool{OutputLimit: 64 << 10, Body: okBody()}, func(c *worker.Config) { c.Log = lg })
	_, err := f.rt.Call(context.Background(), "probe", json.RawMessage(`{}`))
	if !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("call without room: %v, want history_too_large", err)
	}
	if n := f.budget.get("s-1", worker.DefaultTask); n != 0 || f.runs.Load() != 0 || len(lg.all()) != 0 {
		t.Fatalf("refused call counted %d, ran %d times, wrote %q", n, f.runs.Load(), lg.types())
	}
	lg.bytes = 1 << 20
	if _, err := f.rt.Call(context.Background(), "probe", json.RawMessage(`{}`)); err != nil || f.runs.Load() != 1 {
		t.Fatalf("call with room: %v, ran %d times", err, f.runs.Load())
	}
}

// payloadLog is a tightLog on a server whose max_payload is known.
type payloadLog struct {
	tightLog
	max int
}

func (l *payloadLog) MaxPayload() int { return l.max }

// TestRetryRoomCoversEveryTool: the room the recovery worker asks of a
// session before it issues a plan (worker.RetryRoom) is enough for the
// runtime to take the call whatever the tool's output limit — small, the
// default, or over the server's max_payload (the log keeps at most its
// largest event for a result) — so a plan is never issued for an attempt
// the tool worker will refuse for lack of room; with less, the call with
// the largest output limit is refused.
func TestRetryRoomCoversEveryTool(t *testing.T) {
	const maxPayload = 1 << 20
	args := json.RawMessage(`{"amount":1250,"card":"tok_visa"}`)
	_, need := worker.RetryRoom(args, maxPayload)
	for _, limit := range []int{1 << 10, worker.DefaultOutputLimit, 8 << 20} {
		lg := &payloadLog{tightLog: tightLog{bytes: need}, max: maxPayload}
		f := setup(t, worker.Tool{OutputLimit: limit, Body: okBody()}, func(c *worker.Config) { c.Log = lg })
		if _, err := f.rt.Call(context.Background(), "probe", args); err != nil {
			t.Fatalf("output limit %d, room %d (RetryRoom): %v", limit, need, err)
		}
	}
	lg := &payloadLog{tightLog: tightLog{bytes: need - 1}, max: maxPayload}
	f := setup(t, worker.Tool{OutputLimit: 8 << 20, Body: okBody()}, func(c *worker.Config) { c.Log = lg })
	if _, err := f.rt.Call(context.Background(), "probe", args); !errors.Is(err, schema.ErrHistoryTooLarge) {
		t.Fatalf("room one byte under RetryRoom: %v, want history_too_large", err)
	}
}
