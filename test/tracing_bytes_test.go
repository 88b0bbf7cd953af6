package test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestTracingLeavesBytesAlone: the same events — a call, an
// approval.granted carrying a signed approval, a result — appended to the
// same session on two servers, once with tracing off and once inside a
// traced span, are stored as the same bytes; only the traced messages
// carry a traceparent header. The signatures made with tracing on and off
// are the same and verify.
func TestTracingLeavesBytesAlone(t *testing.T) {
	approver, _ := nkeys.CreateUser()
	apub, _ := approver.PublicKey()
	trusted, _ := recovery.NewTrustedKeys(apub)
	at := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	events := func(t *testing.T) []schema.Event {
		a, err := recovery.SignApproval(approver, schema.Approval{V: 1, Session: "s-1", CallID: "c-1", Decision: schema.Approved, Approver: "alice@ops", At: at.Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		if err := recovery.VerifyApproval(a, "s-1", "c-1", trusted); err != nil {
			t.Fatal(err)
		}
		op := &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.NonIdempotent, Revision: "pay-v1"}}
		return []schema.Event{
			{At: at, Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "pay", Arguments: json.RawMessage(`{"amount":5}`), StartMarker: true, Operation: op}},
			{At: at, Type: schema.TypeApprovalRequested, ApprovalRequest: &schema.ApprovalRequest{CallID: "c-1", Deadline: at.Add(time.Minute)}},
			{At: at, Type: schema.TypeApprovalGranted, Approval: &a},
			{At: at, Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
			{At: at, Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusOK, Output: json.RawMessage(`{"ok":true}`)}},
		}
	}
	stored := func(t *testing.T, on bool) ([][]byte, []nats.Header) {
		t.Helper()
		_, _, topo := streamtest.StartWith(t, streamtest.Config{})
		ctx := context.Background()
		if on {
			_, agent := traced(t)
			c, sp := agent.Start(ctx, "agent.turn")
			ctx = c
			defer sp.End()
		}
		lg, err := topo.Logs().OpenLog(ctx, "s-1", "w-1", 1)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, ev := range events(t) {
			seq, err := lg.Append(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		var data [][]byte
		var hdrs []nats.Header
		for _, seq := range seqs {
			m, ok, err := topo.Reader().LeaderGet(ctx, topo.Events.CachedInfo().Config.Name, seq, topo.Names().EventsSubject("s-1"))
			if err != nil || !ok {
				t.Fatalf("event %d: %v", seq, err)
			}
			data, hdrs = append(data, m.Data), append(hdrs, m.Header)
		}
		return data, hdrs
	}
	off, offH := stored(t, false)
	on, onH := stored(t, true)
	if len(on) != len(off) {
		t.Fatalf("%d events traced, %d not", len(on), len(off))
	}
	for i := range on {
		if !bytes.Equal(on[i], off[i]) {
			t.Errorf("event %d differs with tracing on:\n%s\n%s", i, on[i], off[i])
		}
		if offH[i].Get(tracing.HeaderTraceparent) != "" {
			t.Errorf("event %d has a traceparent with tracing off", i)
		}
		if onH[i].Get(tracing.HeaderTraceparent) == "" {
			t.Errorf("event %d has no traceparent with tracing on: %v", i, onH[i])
		}
	}
}
