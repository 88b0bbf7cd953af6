package recovery_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// failed is the first attempt most corrupt cases build on: seq 1–3.
func failed() []schema.Event {
	return []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusFailed, "")}
}

func seqd(e schema.Event, seq uint64) schema.Event { e.Seq = seq; return e }

func sess(e schema.Event, s string) schema.Event { e.Session = s; return e }

func TestInspectErrors(t *testing.T) {
	long := strings.Repeat("k", schema.MaxFieldBytes+1)
	tests := []struct {
		name   string
		events []schema.Event
		call   string
		code   schema.Code
		// msg is a part of the message that names the problem.
		msg string
	}{
		// unknown, superseded, legacy
		{"unknown call", failed(), "c-404", schema.CodeUnknownCall, `"c-404"`},
		{"empty history", nil, "c-1", schema.CodeUnknownCall, `"c-1"`},
		{"superseded", append(failed(), retryEv("c-2", effect.Idempotent, "c-1", 1)), "c-1", schema.CodeSupersededCall, `"c-2"`},
		{"superseded twice", append(failed(), retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusFailed, ""),
			retryEv("c-3", effect.Idempotent, "c-2", 4)), "c-1", schema.CodeSupersededCall, `"c-3"`},
		{"legacy", []schema.Event{with(callEv("c-1", effect.Unknown, true), func(c *schema.Call) { c.Operation = nil }), startedEv("c-1")},
			"c-1", schema.CodeLegacyCall, `"c-1"`},

		// corrupt_history: order and sessions
		{"seq not increasing", []schema.Event{seqd(callEv("c-1", effect.Idempotent, true), 5), seqd(startedEv("c-1"), 4)}, "c-1", schema.CodeCorruptHistory, "seq 4"},
		{"seq repeated", []schema.Event{seqd(callEv("c-1", effect.Idempotent, true), 5), seqd(startedEv("c-1"), 5)}, "c-1", schema.CodeCorruptHistory, "seq 5"},
		{"other session", append(failed(), sess(fencedEv(), "s-2")), "c-1", schema.CodeCorruptHistory, `"s-2"`},
		{"other session's call", append(failed(), sess(callEv("c-9", effect.Idempotent, true), "s-2")), "c-1", schema.CodeCorruptHistory, `"s-2"`},
		{"invalid event in memory", append(failed(), schema.Event{V: 1, Session: testSession, At: testAt, Type: schema.TypeResult}), "c-1", schema.CodeCorruptHistory, "event 4"},

		// corrupt_history: call, started and result pairing
		{"result without call", []schema.Event{resultEv("c-1", schema.StatusOK, "")}, "c-1", schema.CodeCorruptHistory, `"c-1"`},
		{"started without call", []schema.Event{startedEv("c-1")}, "c-1", schema.CodeCorruptHistory, `"c-1"`},
		{"started twice", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), startedEv("c-1")}, "c-1", schema.CodeCorruptHistory, "second tool.started"},
		{"started after result", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, ""), startedEv("c-1")}, "c-1", schema.CodeCorruptHistory, "after its result"},
		{"two results", append(failed(), resultEv("c-1", schema.StatusOK, "")), "c-1", schema.CodeCorruptHistory, "second tool.result"},
		{"duplicate call id", append(failed(), callEv("c-1", effect.Idempotent, true)), "c-1", schema.CodeCorruptHistory, `duplicate call_id "c-1"`},
		{"duplicate call id, legacy", append(failed(), with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation = nil })), "c-1", schema.CodeCorruptHistory, "duplicate"},
		{"rejected without stage", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusRejected, "")}, "c-1", schema.CodeCorruptHistory, "stage"},
		{"stage without rejected", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusFailed, schema.StageGuard)}, "c-1", schema.CodeCorruptHistory, "stage"},
		{"rejected after started", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), resultEv("c-1", schema.StatusRejected, schema.StageGuard)}, "c-1", schema.CodeCorruptHistory, "after its tool.started"},
		{"operation without key", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Key = "" })}, "c-1", schema.CodeCorruptHistory, "key"},
		{"operation without task", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Task = "" })}, "c-1", schema.CodeCorruptHistory, "task"},
		{"contract without revision", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Contract.Revision = "" })}, "c-1", schema.CodeCorruptHistory, "revision"},
		{"contract with invalid effect", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Contract.Effect = 9 })}, "c-1", schema.CodeCorruptHistory, "effect"},
		{"arguments not JSON", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Arguments = []byte(`{"sku":`) })}, "c-1", schema.CodeCorruptHistory, "arguments"},

		// corrupt_history: keys and retry chains
		{"key reused without retry link", append(failed(), callEv("c-2", effect.Idempotent, true)), "c-2", schema.CodeCorruptHistory, `reuses operation key "op-1"`},
		{"retry of a missing call", append(failed(), retryEv("c-2", effect.Idempotent, "c-0", 1)), "c-2", schema.CodeCorruptHistory, `"c-0"`},
		{"retry of a later call", []schema.Event{retryEv("c-2", effect.Idempotent, "c-1", 2), callEv("c-1", effect.Idempotent, true)}, "c-1", schema.CodeCorruptHistory, "not earlier"},
		{"retry with wrong prior_seq", append(failed(), retryEv("c-2", effect.Idempotent, "c-1", 2)), "c-2", schema.CodeCorruptHistory, "prior_seq 2"},
		{"retry of a legacy call", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation = nil }), retryEv("c-2", effect.Idempotent, "c-1", 1)}, "c-2", schema.CodeCorruptHistory, "no operation"},
		{"retry of a completed call", []schema.Event{callEv("c-1", effect.Idempotent, true), resultEv("c-1", schema.StatusOK, ""), retryEv("c-2", effect.Idempotent, "c-1", 1)}, "c-2", schema.CodeCorruptHistory, "completed"},
		{"chain forks", append(failed(), retryEv("c-2", effect.Idempotent, "c-1", 1), retryEv("c-3", effect.Idempotent, "c-1", 1)), "c-3", schema.CodeCorruptHistory, "forks"},
		{"retry with another tool", append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Tool = "orders.delete" })), "c-2", schema.CodeCorruptHistory, "tool"},
		{"retry in another task", append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Operation.Task = "t-2" })), "c-2", schema.CodeCorruptHistory, "task"},
		{"retry with another key", append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Operation.Key = "op-2" })), "c-2", schema.CodeCorruptHistory, "key"},
		{"retry with other arguments", append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Arguments = []byte(`{"sku":"A-1","qty":3}`) })), "c-2", schema.CodeCorruptHistory, "arguments"},
		{"retry with another effect", append(failed(), retryEv("c-2", effect.ReadOnly, "c-1", 1)), "c-2", schema.CodeCorruptHistory, "contract"},
		{"retry with another revision", append(failed(), with(retryEv("c-2", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Operation.Contract.Revision = "orders-v2" })), "c-2", schema.CodeCorruptHistory, "contract"},
		{"prior result after its retry", []schema.Event{callEv("c-1", effect.Idempotent, true), startedEv("c-1"), retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-1", schema.StatusOK, "")}, "c-2", schema.CodeCorruptHistory, "after its retry"},
		{"prior started after its retry", []schema.Event{callEv("c-1", effect.Idempotent, true), retryEv("c-2", effect.Idempotent, "c-1", 1), startedEv("c-1")}, "c-2", schema.CodeCorruptHistory, "after its retry"},
		// corruption anywhere fails every call, also an unknown one
		{"corrupt after the call", append(failed(), startedEv("c-9")), "c-404", schema.CodeCorruptHistory, `"c-9"`},

		// field_too_long: key, call id, revision (1,025 bytes; 1,024 passes in TestFieldLimits)
		{"key too long", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Key = long })}, "c-1", schema.CodeFieldTooLong, "key"},
		{"call id too long", []schema.Event{callEv(long, effect.Idempotent, true)}, "c-1", schema.CodeFieldTooLong, "call_id"},
		{"call id to inspect too long", failed(), long, schema.CodeFieldTooLong, "call id"},
		{"revision too long", []schema.Event{with(callEv("c-1", effect.Idempotent, true), func(c *schema.Call) { c.Operation.Contract.Revision = long })}, "c-1", schema.CodeFieldTooLong, "revision"},
		{"result call id too long", append(failed(), resultEv(long, schema.StatusOK, "")), "c-1", schema.CodeFieldTooLong, "call_id"},
		{"prior call id too long", append(failed(), retryEv("c-2", effect.Idempotent, long, 1)), "c-2", schema.CodeFieldTooLong, "prior_call_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := recovery.Inspect(hist(tc.events...), tc.call)
			checkErr(t, "Inspect", err, tc.code, tc.msg)
			_, err = recovery.PrepareRetry(hist(tc.events...), tc.call, nil)
			checkErr(t, "PrepareRetry", err, tc.code, tc.msg)
			if tc.code == schema.CodeSupersededCall {
				var e *schema.Error
				if errors.As(err, &e) && e.Latest != strings.Trim(tc.msg, `"`) {
					t.Errorf("Latest = %q, want %s", e.Latest, tc.msg)
				}
			}
		})
	}
}

func checkErr(t *testing.T, what string, err error, code schema.Code, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	if got := schema.CodeOf(err); got != code {
		t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
	if !errors.Is(err, &schema.Error{Code: code}) {
		t.Errorf("%s: errors.Is(%v, %s) is false", what, err, code)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: message %q does not mention %q", what, err.Error(), msg)
	}
}

// TestReaderErrors feeds malformed lines through schema.NewHistoryReader:
// the reader's error reaches the caller with its code and line.
func TestReaderErrors(t *testing.T) {
	good := jsonl(t, failed()...)
	tests := []struct {
		name string
		hist string
		code schema.Code
		msg  string
	}{
		{"bad JSON", string(good) + "{\"v\":1,\n", schema.CodeCorruptHistory, "line 4"},
		{"duplicate member names", string(good) + `{"v":1,"seq":4,"seq":5,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"x.tick"}` + "\n", schema.CodeCorruptHistory, "line 4"},
		{"not an object", "[1,2]\n" + string(good), schema.CodeCorruptHistory, "line 1"},
		{"required field missing", string(good) + `{"v":1,"seq":4,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.call","call":{"call_id":"c-2"}}` + "\n", schema.CodeCorruptHistory, "line 4"},
		{"bad status", string(good) + `{"v":1,"seq":4,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.result","result":{"call_id":"c-1","status":"weird"}}` + "\n", schema.CodeCorruptHistory, "line 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := recovery.Inspect(reader([]byte(tc.hist)), "c-1")
			checkErr(t, "Inspect", err, tc.code, tc.msg)
		})
	}
}

// errSource is a history source that fails with an uncoded error.
var errSource = errors.New("source went away")

func TestSeqMissing(t *testing.T) {
	e := callEv("c-1", effect.Idempotent, true)
	for _, evs := range [][]schema.Event{{e}, {seqd(e, 1), fencedEv()}} {
		_, err := recovery.Inspect(schema.Events(evs), "c-1")
		checkErr(t, "Inspect", err, schema.CodeCorruptHistory, "no seq")
	}
}

func TestSourceErrorIsWrapped(t *testing.T) {
	h := func(yield func(schema.Event, error) bool) {
		e := callEv("c-1", effect.Idempotent, true)
		e.Seq = 1
		if yield(e, nil) {
			yield(schema.Event{}, errSource)
		}
	}
	_, err := recovery.Inspect(h, "c-1")
	if !errors.Is(err, errSource) || schema.CodeOf(err) != "" {
		t.Fatalf("got %v (code %q), want the source's error uncoded", err, schema.CodeOf(err))
	}
}

// TestFieldLimits: exactly 1,024 bytes passes, 1,025 fails, for every
// bounded field.
func TestFieldLimits(t *testing.T) {
	at := strings.Repeat("x", schema.MaxFieldBytes)
	over := at + "x"
	type setter func(id *string, c *schema.Call, r *schema.Review)
	fields := []struct {
		name string
		set  setter
	}{
		{"operation key", func(_ *string, c *schema.Call, _ *schema.Review) { c.Operation.Key = at }},
		{"call id", func(id *string, c *schema.Call, r *schema.Review) { c.CallID, r.CallID, *id = at, at, at }},
		{"contract revision", func(_ *string, c *schema.Call, _ *schema.Review) { c.Operation.Contract.Revision = at }},
		{"review operator", func(_ *string, _ *schema.Call, r *schema.Review) { r.Operator = at }},
		{"review evidence", func(_ *string, _ *schema.Call, r *schema.Review) { r.Evidence = at }},
	}
	for _, f := range fields {
		for _, n := range []string{at, over} {
			name := f.name + "/" + map[bool]string{true: "1024", false: "1025"}[n == at]
			t.Run(name, func(t *testing.T) {
				id := "c-1"
				c := *callEv("c-1", effect.NonIdempotent, true).Call
				op := *c.Operation
				c.Operation = &op
				r := schema.Review{V: 1, Session: testSession, CallID: "c-1", Operator: "alice@ops", Evidence: "ticket-431", Verdict: schema.VerdictNotExecuted}
				f.set(&id, &c, &r)
				// replace the 1,024-byte value by the test's value
				swap := func(s *string) {
					if *s == at {
						*s = n
					}
				}
				swap(&id)
				swap(&c.CallID)
				swap(&c.Operation.Key)
				swap(&c.Operation.Contract.Revision)
				swap(&r.CallID)
				swap(&r.Operator)
				swap(&r.Evidence)
				e := schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeCall, Call: &c}
				evs := []schema.Event{e, startedEv(c.CallID), resultEv(c.CallID, schema.StatusTimeout, "")}
				// through the reader, as the CLI reads
				p, err := recovery.PrepareRetry(reader(jsonl(t, evs...)), id, &r)
				if n == at {
					if err != nil {
						t.Fatalf("1,024 bytes: %v", err)
					}
					if p.Basis != schema.BasisReviewedNotExecuted || p.PriorCallID != id {
						t.Errorf("plan %+v", p)
					}
					return
				}
				if schema.CodeOf(err) != schema.CodeFieldTooLong {
					t.Fatalf("1,025 bytes: got %v, want field_too_long", err)
				}
				if !strings.Contains(err.Error(), "1025") {
					t.Errorf("message %q does not name the size", err)
				}
			})
		}
	}
}

// TestHistoryLimits: 100,000 events pass and 100,001 fail, through the
// reader with default limits and from memory; more than 16 MiB fails.
func TestHistoryLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 12 MB histories")
	}
	// one call, then short events of a type recovery ignores: the count is
	// what is tested, and short lines keep the test fast under -race
	all := []byte(`{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"r1"}}}}` + "\n")
	for i := 2; i <= schema.MaxHistoryEvents+1; i++ {
		all = append(all, `{"v":1,"seq":`...)
		all = strconv.AppendInt(all, int64(i), 10)
		all = append(all, `,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"x"}`+"\n"...)
	}
	cut := bytes.LastIndexByte(all[:len(all)-1], '\n') + 1 // end of event 100,000
	a, err := recovery.Inspect(reader(all[:cut]), "c-1")
	if err != nil {
		t.Fatalf("100,000 events: %v", err)
	}
	if a.Outcome != schema.OutcomeNotStarted || a.Evidence != "not_started_marker" {
		t.Errorf("100,000 events: %+v", a)
	}
	_, err = recovery.Inspect(reader(all), "c-1")
	checkErr(t, "100,001 events", err, schema.CodeHistoryTooLarge, "100000")

	// the same count from memory (no reader to count): Inspect counts too
	evs := make([]schema.Event, schema.MaxHistoryEvents+1)
	evs[0] = callEv("c-1", effect.Idempotent, true)
	for i := 1; i < len(evs); i++ {
		evs[i] = schema.Event{V: 1, Session: testSession, At: testAt, Type: "x.note"}
	}
	if _, err := recovery.Inspect(hist(evs[:schema.MaxHistoryEvents]...), "c-1"); err != nil {
		t.Fatalf("100,000 events in memory: %v", err)
	}
	_, err = recovery.Inspect(hist(evs...), "c-1")
	checkErr(t, "100,001 events in memory", err, schema.CodeHistoryTooLarge, "100000")

	// over 16 MiB in few events: one call whose arguments are 16 MiB
	big := make([]byte, 0, schema.MaxHistoryBytes+1024)
	big = append(big, `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:00Z","type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{"blob":"`...)
	big = append(big, bytes.Repeat([]byte("a"), schema.MaxHistoryBytes)...)
	big = append(big, `"},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"idempotent","revision":"r1"}}}}`+"\n"...)
	_, err = recovery.Inspect(reader(big), "c-1")
	checkErr(t, "over 16 MiB", err, schema.CodeHistoryTooLarge, "16777216")
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}
