package schema_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/bench/histgen"
	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
)

// sameEncoding fails the test unless EncodeEvent and the reflection-based
// reference encoder return the same bytes, or errors with the same code
// and message.
func sameEncoding(t *testing.T, what string, ev schema.Event) {
	t.Helper()
	got, gerr := schema.EncodeEvent(ev)
	want, werr := schema.EncodeEventReflect(ev)
	switch {
	case (gerr == nil) != (werr == nil):
		t.Fatalf("%s: EncodeEvent error %v, reference error %v\n%+v", what, gerr, werr, ev)
	case gerr != nil:
		if gerr.Error() != werr.Error() || schema.CodeOf(gerr) != schema.CodeOf(werr) {
			t.Fatalf("%s: EncodeEvent error %q (%s), reference %q (%s)", what, gerr, schema.CodeOf(gerr), werr, schema.CodeOf(werr))
		}
	case !bytes.Equal(got, want):
		t.Fatalf("%s: EncodeEvent differs from the reference:\n got %s\nwant %s", what, got, want)
	}
	// AppendEvent after existing bytes writes the same line after them.
	prefix := []byte("prefix:")
	app, aerr := schema.AppendEvent(bytes.Clone(prefix), &ev)
	if (aerr == nil) != (gerr == nil) || aerr == nil && !bytes.Equal(app, append(bytes.Clone(prefix), got...)) || aerr != nil && !bytes.Equal(app, prefix) {
		t.Fatalf("%s: AppendEvent gave %q, %v; EncodeEvent %q, %v", what, app, aerr, got, gerr)
	}
}

// TestEncodeEventMatchesReflect encodes every event of a generated
// 100,000-event history (calls with operations, retries with reviews and
// signed plans, results of every status, fences, unknown types) and of the
// conformance fixtures, plus hand-made edge cases, with EncodeEvent and
// with the reference encoder (encoding/json, then DecodeEvent over its
// output), and requires byte-identical lines, or the same error.
func TestEncodeEventMatchesReflect(t *testing.T) {
	h := histgen.Generate(histgen.Config{Seed: 7})
	types := map[string]int{}
	for i, ev := range h.Events {
		types[ev.Type]++
		sameEncoding(t, "generated event "+ev.Type, ev)
		if i%97 == 0 {
			// Also as Log.Append sends them: no seq.
			ev.Seq = 0
			sameEncoding(t, "generated event without seq", ev)
		}
	}
	if len(types) < 4 {
		t.Fatalf("generated history has only the types %v", types)
	}
	fixtures := 0
	for _, fx := range loadFixtures(t) {
		for _, line := range bytes.Split(fx.jsonl(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			ev, err := schema.DecodeEvent(line)
			if err != nil {
				continue // a fixture of a corrupt history
			}
			fixtures++
			sameEncoding(t, "fixture "+fx.Name, ev)
		}
	}
	if fixtures < 50 {
		t.Fatalf("only %d fixture events decoded", fixtures)
	}
	for name, ev := range encodeEdgeCases() {
		sameEncoding(t, name, ev)
	}
}

func baseEvent(typ string) schema.Event {
	return schema.Event{V: schema.Version, Session: "s-1", Epoch: 3, At: time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.UTC), Type: typ}
}

func callEvent(mod func(c *schema.Call)) schema.Event {
	ev := baseEvent(schema.TypeCall)
	ev.Call = &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1","qty":1}`), StartMarker: true,
		Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "r1"}}}
	if mod != nil {
		mod(ev.Call)
	}
	return ev
}

func resultEvent(mod func(r *schema.Result)) schema.Event {
	ev := baseEvent(schema.TypeResult)
	ev.Result = &schema.Result{CallID: "c-1", Status: schema.StatusOK, Output: json.RawMessage(`"ok"`)}
	if mod != nil {
		mod(ev.Result)
	}
	return ev
}

// resultAt is resultEvent(nil) with its At set to at(At).
func resultAt(at func(time.Time) time.Time) schema.Event {
	ev := resultEvent(nil)
	ev.At = at(ev.At)
	return ev
}

// encodeEdgeCases are events at every boundary of the fast encoder: what it
// writes itself, what it leaves to the reference, and what neither accepts.
func encodeEdgeCases() map[string]schema.Event {
	deep := func(n int) json.RawMessage {
		return json.RawMessage(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	signer := "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	retry := &schema.RetryLink{PriorCallID: "c-0", PriorSeq: 17, PlanID: "p-1", Basis: schema.BasisReviewedNotExecuted,
		Review: &schema.Review{V: 1, Session: "s-1", CallID: "c-0", Operator: "alice <a&b>", Evidence: "ticket \"42\"", Verdict: schema.VerdictNotExecuted,
			At: "2026-11-29T11:00:00Z", Signer: signer, Sig: "c2ln"},
		IssuedAt: time.Date(2026, 11, 29, 11, 0, 1, 5, time.UTC), Signer: signer, Sig: "c2ln"}
	cases := map[string]schema.Event{
		"plain call":            callEvent(nil),
		"legacy call":           callEvent(func(c *schema.Call) { c.Operation = nil; c.StartMarker = false }),
		"call started":          callEvent(func(c *schema.Call) { c.Started, c.StartMarker = true, false }),
		"call started + marker": callEvent(func(c *schema.Call) { c.Started = true }),
		"call with ids":         callEvent(func(c *schema.Call) { c.RequestID = "r-1"; c.ProviderCallID = "toolu_1" }),
		"call retry":            callEvent(func(c *schema.Call) { c.Operation.Retry = retry }),
		"call retry bare": callEvent(func(c *schema.Call) {
			c.Operation.Retry = &schema.RetryLink{PriorCallID: "c-0", PlanID: "p", Basis: schema.BasisNotStarted}
		}),
		"retry local issued_at": callEvent(func(c *schema.Call) {
			r := *retry
			r.IssuedAt = r.IssuedAt.In(time.FixedZone("X", 3600))
			c.Operation.Retry = &r
		}),
		"retry review no at": callEvent(func(c *schema.Call) {
			r := *retry
			rv := *r.Review
			rv.At, rv.Signer, rv.Sig = "", "", ""
			r.Review = &rv
			c.Operation.Retry = &r
		}),
		"args whitespace": callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(" {\n\t\"a\" : [ 1 , 2 ],\r\n \"b\": \"x y\" } ") }),
		"args html": callEvent(func(c *schema.Call) {
			c.Arguments = json.RawMessage(`{"h":"<a href='x'>&amp;</a>","u":"\u2028 ` + "\u2028" + `"}`)
		}),
		"args escapes":           callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`{"a":"\u0061\"\\\/\b\f\n\r\t\ud83d\ude00"}`) }),
		"args duplicate":         callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`{"a":1,"a":2}`) }),
		"args escaped duplicate": callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`{"a":1,"\u0061":2}`) }),
		"args invalid":           callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`{"a":}`) }),
		"args trailing":          callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`{} {}`) }),
		"args bad utf8":          callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage("\"\xff\"") }),
		"args lone surrogate":    callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`"\ud800"`) }),
		"args big number":        callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`[1e400]`) }),
		"args long number": callEvent(func(c *schema.Call) {
			c.Arguments = json.RawMessage(`[` + strings.Repeat("9", schema.MaxNumberBytes+1) + `]`)
		}),
		"args fine number":      callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`[-0.5e-10,1E+300,0]`) }),
		"args scalar":           callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`42`) }),
		"args null":             callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`null`) }),
		"args deep ok":          callEvent(func(c *schema.Call) { c.Arguments = deep(9000) }),
		"args deep 9997":        callEvent(func(c *schema.Call) { c.Arguments = deep(9997) }),
		"args deep 9998":        callEvent(func(c *schema.Call) { c.Arguments = deep(9998) }),
		"args deep 9999":        callEvent(func(c *schema.Call) { c.Arguments = deep(9999) }),
		"args deep 10001":       callEvent(func(c *schema.Call) { c.Arguments = deep(10001) }),
		"args deep in string":   callEvent(func(c *schema.Call) { c.Arguments = json.RawMessage(`["` + strings.Repeat("[", 25000) + `"]`) }),
		"args empty":            callEvent(func(c *schema.Call) { c.Arguments = nil }),
		"tool escapes":          callEvent(func(c *schema.Call) { c.Tool = "t\"\\\x00\x01\x1f\x7f\b\f\n\r\t<>&" }),
		"tool unicode":          callEvent(func(c *schema.Call) { c.Tool = "工具 \u2028\u2029 \U0001F600 \uFFFD" }),
		"tool bad utf8":         callEvent(func(c *schema.Call) { c.Tool = "t\xff\xfe" }),
		"tool truncated utf8":   callEvent(func(c *schema.Call) { c.Tool = "t\xe2\x80" }),
		"call id bad utf8 long": callEvent(func(c *schema.Call) { c.CallID = strings.Repeat("\xff", schema.MaxFieldBytes) }),
		"call id max":           callEvent(func(c *schema.Call) { c.CallID = strings.Repeat("x", schema.MaxFieldBytes) }),
		"call id too long":      callEvent(func(c *schema.Call) { c.CallID = strings.Repeat("x", schema.MaxFieldBytes+1) }),
		"call no tool":          callEvent(func(c *schema.Call) { c.Tool = "" }),
		"bad effect":            callEvent(func(c *schema.Call) { c.Operation.Contract.Effect = 9 }),
		"all effects": callEvent(func(c *schema.Call) {
			c.Operation.Contract.Effect = effect.NonIdempotent
		}),
		"started": func() schema.Event {
			ev := baseEvent(schema.TypeStarted)
			ev.Started = &schema.Started{CallID: "c-1"}
			return ev
		}(),
		"started no id":    func() schema.Event { ev := baseEvent(schema.TypeStarted); ev.Started = &schema.Started{}; return ev }(),
		"result ok":        resultEvent(nil),
		"result no output": resultEvent(func(r *schema.Result) { r.Output = nil }),
		"result rejected": resultEvent(func(r *schema.Result) {
			r.Status, r.Stage, r.Error, r.Output = schema.StatusRejected, schema.StageBudget, "budget <exhausted> & \"done\"", nil
		}),
		"result no stage": resultEvent(func(r *schema.Result) { r.Status = schema.StatusRejected }),
		"result retryable": resultEvent(func(r *schema.Result) {
			r.Status, r.Retryable, r.Error = schema.StatusFailed, true, "line1\nline2\ttab"
		}),
		"result bad status": resultEvent(func(r *schema.Result) { r.Status = "weird" }),
		"result big output": resultEvent(func(r *schema.Result) { r.Output = json.RawMessage(`"` + strings.Repeat("x", 50000) + `"`) }),
		"result bad error":  resultEvent(func(r *schema.Result) { r.Error = "e\xc3" }),
		"fence": func() schema.Event {
			ev := baseEvent(schema.TypeFenced)
			ev.Fence = &schema.Fence{Epoch: 3, Owner: "w-1"}
			return ev
		}(),
		"fence max epoch": func() schema.Event {
			ev := baseEvent(schema.TypeFenced)
			ev.Epoch = schema.MaxEpoch
			ev.Fence = &schema.Fence{Epoch: schema.MaxEpoch}
			return ev
		}(),
		"fence over epoch": func() schema.Event {
			ev := baseEvent(schema.TypeFenced)
			ev.Fence = &schema.Fence{Epoch: schema.MaxEpoch + 1}
			return ev
		}(),
		"unknown type": baseEvent("tool.progress"),
		"unknown w/ body": func() schema.Event {
			ev := baseEvent("tool.progress")
			ev.Started = &schema.Started{CallID: "c"}
			return ev
		}(),
		"type escapes":    baseEvent("x\"y\u2029"),
		"no type":         baseEvent(""),
		"seq":             func() schema.Event { ev := resultEvent(nil); ev.Seq = 1<<64 - 1; return ev }(),
		"bad version":     func() schema.Event { ev := resultEvent(nil); ev.V = 2; return ev }(),
		"bad session":     func() schema.Event { ev := resultEvent(nil); ev.Session = "s 1"; return ev }(),
		"epoch 0":         func() schema.Event { ev := resultEvent(nil); ev.Epoch = 0; return ev }(),
		"no at":           resultAt(func(time.Time) time.Time { return time.Time{} }),
		"at local":        resultAt(func(at time.Time) time.Time { return at.In(time.FixedZone("IST", 5*3600+1800)) }),
		"at odd offset":   resultAt(func(at time.Time) time.Time { return at.In(time.FixedZone("LMT", 3600+17)) }),
		"at big offset":   resultAt(func(at time.Time) time.Time { return at.In(time.FixedZone("Z", 25*3600)) }),
		"at utc zone":     resultAt(func(at time.Time) time.Time { return at.In(time.FixedZone("UTC", 0)) }),
		"at year 0":       resultAt(func(time.Time) time.Time { return time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }),
		"at year 9999":    resultAt(func(time.Time) time.Time { return time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) }),
		"at year 10000":   resultAt(func(time.Time) time.Time { return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }),
		"at year -1":      resultAt(func(time.Time) time.Time { return time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }),
		"at whole second": resultAt(func(time.Time) time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }),
		"at monotonic":    resultAt(func(time.Time) time.Time { return time.Now().UTC() }),
		"at local now":    resultAt(func(time.Time) time.Time { return time.Now() }),
		"approval request": func() schema.Event {
			ev := baseEvent(schema.TypeApprovalRequested)
			ev.ApprovalRequest = &schema.ApprovalRequest{CallID: "c-1", Deadline: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
			return ev
		}(),
	}
	return cases
}

// FuzzEncodeEvent builds events from fuzzed strings, raw values, numbers
// and times and requires EncodeEvent and the reference encoder to agree
// on every one (bytes, or the error).
func FuzzEncodeEvent(f *testing.F) {
	f.Add(uint8(0), "c-1", "orders.create", []byte(`{"sku":"A-1","qty":1}`), "t-1", "op-1", "r1", int64(1764597600123456789), uint64(3), "")
	f.Add(uint8(1), "c-1", "tool\u2028", []byte("{ \"a\" : [1, 2e5] }"), "t", "k", "rev", int64(0), uint64(0), "error \"x\"\n")
	f.Add(uint8(2), "c\xff", "t", []byte(`{"a":1,"a":2}`), "t", "k", "r", int64(-1), uint64(1<<53), "\x00")
	f.Add(uint8(3), "c", "t", []byte(`[1e400]`), "", "k", "r", int64(1<<62), uint64(1<<53-1), "e")
	f.Add(uint8(4), "c", "t", []byte("\"\xed\xa0\x80\""), "t", "k", "r", int64(1), uint64(7), "<&>")
	f.Add(uint8(5), "", "", []byte(`null`), "t", "k", "r", int64(2), uint64(8), "")
	f.Add(uint8(6), "c", "t", []byte(`"\ud800"`), "t", "k", "r", int64(3), uint64(9), "")
	f.Add(uint8(7), "c", "t", []byte(`{"x":[{"y":null,"z":true}]}`), "t", "k", "r", int64(4), uint64(10), "")
	f.Fuzz(func(t *testing.T, kind uint8, id, tool string, raw []byte, task, key, rev string, nanos int64, n uint64, text string) {
		at := time.Unix(0, nanos).UTC()
		switch kind >> 5 {
		case 1:
			at = at.In(time.FixedZone("X", int(n%100000)-50000))
		case 2:
			at = time.Time{}
		case 3:
			at = at.AddDate(int(n%20000)-10000, 0, 0)
		}
		ev := schema.Event{V: schema.Version, Session: "s-1", Epoch: n % (1 << 54), At: at}
		if kind&16 != 0 {
			ev.Seq = n
		}
		switch kind % 8 {
		case 0, 1, 2:
			ev.Type = schema.TypeCall
			ev.Call = &schema.Call{CallID: id, Tool: tool, Arguments: raw, StartMarker: kind&8 != 0, Started: kind&4 != 0, RequestID: text}
			if kind%8 != 2 {
				ev.Call.Operation = &schema.Operation{Task: task, Key: key, Contract: effect.Contract{Effect: effect.Effect(n % 5), Revision: rev}}
			}
			if kind%8 == 1 {
				ev.Call.Operation.Retry = &schema.RetryLink{PriorCallID: key, PriorSeq: n, PlanID: task, Basis: schema.Basis(rev),
					IssuedAt: at, Review: &schema.Review{V: 1, Session: "s-1", CallID: key, Operator: text, Evidence: tool, Verdict: schema.Verdict(id), At: text}}
			}
		case 3:
			ev.Type = schema.TypeStarted
			ev.Started = &schema.Started{CallID: id}
		case 4, 5:
			ev.Type = schema.TypeResult
			ev.Result = &schema.Result{CallID: id, Status: schema.Status(tool), Retryable: kind&8 != 0, Stage: schema.Stage(task), Output: raw, Error: text}
			if kind%8 == 5 {
				ev.Result.Status, ev.Result.Stage = schema.StatusOK, ""
			}
		case 6:
			ev.Type = schema.TypeFenced
			ev.Fence = &schema.Fence{Epoch: n, Owner: text}
		case 7:
			ev.Type = tool
		}
		sameEncoding(t, "fuzzed event", ev)
	})
}

// FuzzEncodeDecoded decodes fuzzed event lines, seeded with every event of
// the conformance fixtures; every event DecodeEvent accepts must encode
// the same with EncodeEvent as with the reference encoder.
func FuzzEncodeDecoded(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		for _, line := range bytes.Split(fx.jsonl(), []byte("\n")) {
			if len(line) > 0 {
				f.Add(line)
			}
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := schema.DecodeEvent(line)
		if err != nil {
			return
		}
		sameEncoding(t, "decoded event", ev)
	})
}

// TestEncodeEventFastAllocs: encoding an event on the append path takes
// one allocation (its line) and none for a caller's buffer.
func TestEncodeEventFastAllocs(t *testing.T) {
	for name, ev := range map[string]schema.Event{"call": callEvent(nil), "result": resultEvent(nil)} {
		if n := testing.AllocsPerRun(200, func() {
			if _, err := schema.EncodeEvent(ev); err != nil {
				t.Fatal(err)
			}
		}); n > 1 {
			t.Errorf("%s: EncodeEvent: %.0f allocations, want 1", name, n)
		}
		buf := make([]byte, 0, 4096)
		if n := testing.AllocsPerRun(200, func() {
			if _, err := schema.AppendEvent(buf[:0], &ev); err != nil {
				t.Fatal(err)
			}
		}); n > 0 {
			t.Errorf("%s: AppendEvent into a buffer: %.0f allocations, want 0", name, n)
		}
	}
}

// BenchmarkEncodeEvent compares EncodeEvent with the reference encoder on
// the append benchmark's tool.result and on a tool.call.
func BenchmarkEncodeEvent(b *testing.B) {
	res := resultEvent(func(r *schema.Result) { r.Output = json.RawMessage(`"` + strings.Repeat("x", 150) + `"`) })
	for name, ev := range map[string]schema.Event{"result": res, "call": callEvent(nil)} {
		b.Run(name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schema.EncodeEvent(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/reflect", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schema.EncodeEventReflect(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
