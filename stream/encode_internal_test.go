package stream

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/schema"
)

// TestEncodeEventSameBytes: the fast path writes exactly what
// schema.EncodeEvent writes, and refuses exactly what it refuses.
func TestEncodeEventSameBytes(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 4005, time.UTC)
	ev := func(typ string, st *schema.Started, r *schema.Result) schema.Event {
		return schema.Event{V: schema.Version, Session: "s-1_A", Epoch: 18446744073709551615, At: at, Type: typ, Started: st, Result: r}
	}
	id := "c-" + strings.Repeat("0a", 16)
	var cases []schema.Event
	cases = append(cases,
		ev(schema.TypeStarted, &schema.Started{CallID: id}, nil),
		ev(schema.TypeStarted, &schema.Started{CallID: `c-"quoted"\`}, nil),
		ev(schema.TypeStarted, &schema.Started{CallID: "c-é\u2028<&>"}, nil),
		ev(schema.TypeStarted, &schema.Started{CallID: ""}, nil),                                                 // invalid
		ev(schema.TypeStarted, &schema.Started{CallID: strings.Repeat("x", 1025)}, nil),                          // too long
		ev(schema.TypeStarted, &schema.Started{CallID: id}, &schema.Result{CallID: id, Status: schema.StatusOK}), // two bodies
		ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: "bogus"}),
		ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: schema.StatusRejected}),                                     // no stage
		ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: schema.StatusOK, Stage: schema.StageBudget}),                // stage without rejected
		ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: schema.StatusOK, Output: json.RawMessage(`{"a": [1, 2]}`)}), // slow path
		ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: schema.StatusFailed, Error: "line1\nline2\t\x00 \"q\" </script> \xff"}),
	)
	for _, st := range []schema.Status{schema.StatusOK, schema.StatusFailed, schema.StatusTimeout, schema.StatusCancelled, schema.StatusBudgetExhausted, schema.StatusOutputLimit} {
		for _, retry := range []bool{false, true} {
			cases = append(cases, ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: st, Retryable: retry, Error: "body said: no (code 7)"}))
			cases = append(cases, ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: st, Retryable: retry}))
		}
	}
	for _, stage := range []schema.Stage{schema.StagePermission, schema.StageArguments, schema.StageGuard, schema.StageApproval, schema.StageBudget} {
		cases = append(cases, ev(schema.TypeResult, nil, &schema.Result{CallID: id, Status: schema.StatusRejected, Stage: stage, Error: "tool_calls 4 over the limit 3 for task t-1"}))
	}
	for _, a := range []time.Time{at.Truncate(time.Second), at.Truncate(time.Millisecond), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), at.In(time.FixedZone("x", 3600))} {
		e := ev(schema.TypeStarted, &schema.Started{CallID: id}, nil)
		e.At = a
		cases = append(cases, e)
	}
	e := ev(schema.TypeStarted, &schema.Started{CallID: id}, nil)
	e.Seq = 7
	cases = append(cases, e)
	e = ev(schema.TypeStarted, &schema.Started{CallID: id}, nil)
	e.Session = "bad session"
	cases = append(cases, e)

	fast := 0
	for i, c := range cases {
		want, wantErr := schema.EncodeEvent(c)
		got, gotErr := encodeEvent(c)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Errorf("case %d: got %s (%v), want %s (%v)", i, got, gotErr, want, wantErr)
		}
		if _, ok, _ := encodeFast(&c); ok {
			fast++
		}
	}
	if fast < 20 {
		t.Errorf("only %d cases took the fast path", fast)
	}
}

// FuzzEncodeEvent holds the fast path to schema.EncodeEvent's bytes for
// any call id, status, stage and error text.
func FuzzEncodeEvent(f *testing.F) {
	f.Add("c-1", "ok", "", "", false, int64(0))
	f.Add("c-1", "rejected", "budget", "over", true, int64(1))
	f.Add("c-\"1", "failed", "", "a\u2028b", false, int64(-1))
	f.Fuzz(func(t *testing.T, id, status, stage, msg string, retry bool, nanos int64) {
		at := time.Unix(1_800_000_000, nanos%1e9).UTC()
		for _, c := range []schema.Event{
			{V: 1, Session: "s", Epoch: 1, At: at, Type: schema.TypeStarted, Started: &schema.Started{CallID: id}},
			{V: 1, Session: "s", Epoch: 1, At: at, Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: schema.Status(status), Stage: schema.Stage(stage), Error: msg, Retryable: retry}},
		} {
			want, wantErr := schema.EncodeEvent(c)
			got, gotErr := encodeEvent(c)
			if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("got %s (%v), want %s (%v)", got, gotErr, want, wantErr)
			}
		}
	})
}
