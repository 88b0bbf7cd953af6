package recovery_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

const testSession = "s-1"

var testAt = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// ev builders. Seq is left 0 and filled by hist in order, unless set.

func callEv(id string, eff effect.Effect, marker bool) schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeCall, Call: &schema.Call{
		CallID: id, Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":2}`), StartMarker: marker,
		Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: eff, Revision: "orders-v1"}},
	}}
}

// retryEv is a retry of prior (at priorSeq) with the same tool, task, key,
// arguments and contract as callEv.
func retryEv(id string, eff effect.Effect, prior string, priorSeq uint64) schema.Event {
	e := callEv(id, eff, true)
	e.Call.Operation.Retry = &schema.RetryLink{PriorCallID: prior, PriorSeq: priorSeq, PlanID: "p-x", Basis: schema.BasisUncertainSafe}
	return e
}

func startedEv(id string) schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeStarted, Started: &schema.Started{CallID: id}}
}

func resultEv(id string, st schema.Status, stage schema.Stage) schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeResult, Result: &schema.Result{CallID: id, Status: st, Stage: stage}}
}

func fencedEv() schema.Event {
	return schema.Event{V: 1, Session: testSession, Epoch: 2, At: testAt, Type: schema.TypeFenced, Fence: &schema.Fence{Epoch: 2, Owner: "recovery-1"}}
}

// with applies f to a copy of e's call (deep enough for the fields tests
// change) and returns the event.
func with(e schema.Event, f func(c *schema.Call)) schema.Event {
	c := *e.Call
	if c.Operation != nil {
		op := *c.Operation
		if op.Retry != nil {
			r := *op.Retry
			op.Retry = &r
		}
		c.Operation = &op
	}
	f(&c)
	e.Call = &c
	return e
}

// hist numbers events without a seq 1, 2, 3, … in order and returns them as
// a History.
func hist(evs ...schema.Event) schema.History {
	out := make([]schema.Event, len(evs))
	for i, e := range evs {
		if e.Seq == 0 {
			e.Seq = uint64(i + 1)
		}
		out[i] = e
	}
	return schema.Events(out)
}

// jsonl renders events as a JSON Lines history, numbering them like hist.
func jsonl(t testing.TB, evs ...schema.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i, e := range evs {
		if e.Seq == 0 {
			e.Seq = uint64(i + 1)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// reader returns a History decoding b with the default limits.
func reader(b []byte) schema.History {
	return schema.NewHistoryReader(bytes.NewReader(b), schema.DefaultLimits).All()
}

// genHistory appends JSON Lines for n events to dst, a plausible agent
// session: every call of an idempotent tool takes four events — tool.call,
// tool.started, tool.result, and a short event of an unknown type recovery
// ignores. Of every ten calls seven end ok, one fails, the next one retries
// it (same key and arguments, linked by operation.retry) and times out, and
// one is left open (no result: an ignored event in its place). It returns
// the bytes and the id of the last call whose tool.call was written. Events
// average about 165 bytes: 100,000 take some 16.4 MB, just under the
// 16 MiB limit.
func genHistory(dst []byte, n int) ([]byte, string) {
	last := ""
	var id, root []byte
	for i, c := 0, 0; i < n; c++ {
		id = append(id[:0], "c-"...)
		id = strconv.AppendInt(id, int64(c), 10)
		kind := c % 10
		retry := kind == 8
		if !retry {
			root = append(root[:0], id...)
		}
		for step := 0; step < 4 && i < n; step, i = step+1, i+1 {
			dst = append(dst, `{"v":1,"seq":`...)
			dst = strconv.AppendInt(dst, int64(i+1), 10)
			dst = append(dst, `,"session":"s","epoch":1,"at":"2026-11-29T10:00:00Z",`...)
			switch {
			case step == 0:
				dst = append(dst, `"type":"tool.call","call":{"call_id":"`...)
				dst = append(dst, id...)
				dst = append(dst, `","tool":"orders.new","arguments":{"sku":"`...)
				dst = append(dst, root[2:]...)
				dst = append(dst, `","qty":2},"start_marker":true,"operation":{"task":"t-1","key":"k`...)
				dst = append(dst, root...)
				dst = append(dst, `","contract":{"effect":"idempotent","revision":"v1"}`...)
				if retry {
					dst = append(dst, `,"retry":{"prior_call_id":"`...)
					dst = append(dst, root...)
					dst = append(dst, `","prior_seq":`...)
					dst = strconv.AppendInt(dst, int64(i+1-4), 10)
					dst = append(dst, `,"plan_id":"p-1","basis":"uncertain_safe"}`...)
				}
				dst = append(dst, `}}}`...)
				last = string(id)
			case step == 1:
				dst = append(dst, `"type":"tool.started","started":{"call_id":"`...)
				dst = append(dst, id...)
				dst = append(dst, `"}}`...)
			case step == 2 && kind != 9:
				dst = append(dst, `"type":"tool.result","result":{"call_id":"`...)
				dst = append(dst, id...)
				switch kind {
				case 7:
					dst = append(dst, `","status":"failed","retryable":true}}`...)
				case 8:
					dst = append(dst, `","status":"timeout","retryable":true}}`...)
				default:
					dst = append(dst, `","status":"ok","retryable":false}}`...)
				}
			default:
				dst = append(dst, `"type":"x"}`...)
			}
			dst = append(dst, '\n')
		}
	}
	return dst, last
}
