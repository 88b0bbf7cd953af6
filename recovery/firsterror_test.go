package recovery_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// firstErrorCases are corrupt histories with more than one problem, or a
// problem far from the events around it, each with the exact error Inspect
// returns: the problem of the earliest event, and at one event the first
// check in the order onCall makes them (call_id length, duplicate call_id,
// stopped task, operation fields, retry link, operation key reuse). The
// duplicate checks of call ids and operation keys are made once the rest
// of the history has been read or has failed (inspect.go, dups); these
// cases pin that the answer is the one a check at the event itself gives.
func firstErrorCases() []struct {
	name   string
	events []schema.Event
	msg    string
} {
	long := strings.Repeat("k", schema.MaxFieldBytes+1)
	keyed := func(id, task, key string) schema.Event {
		return with(callEv(id, effect.Idempotent, true), func(c *schema.Call) { c.Operation.Task, c.Operation.Key = task, key })
	}
	stop := schema.Event{V: 1, Session: testSession, Epoch: 1, At: testAt, Type: schema.TypeTaskStopped, Stop: &schema.Stop{Task: "t-1", By: schema.StoppedByHost}}
	// many distinct calls, each with its result: beyond any window of
	// recent calls a lookup may try first
	many := func(n int) []schema.Event {
		var out []schema.Event
		for i := range n {
			out = append(out, keyed(fmt.Sprintf("m-%d", i), "t-m", fmt.Sprintf("op-m-%d", i)))
		}
		for i := range n {
			out = append(out, resultEv(fmt.Sprintf("m-%d", i), schema.StatusOK, ""))
		}
		return out
	}
	cat := func(parts ...[]schema.Event) []schema.Event {
		var out []schema.Event
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	ev := func(e ...schema.Event) []schema.Event { return e }
	return []struct {
		name   string
		events []schema.Event
		msg    string
	}{
		{"duplicate id, then a second result", cat(failed(), ev(keyed("c-1", "t-2", "op-2"), resultEv("c-1", schema.StatusOK, ""), resultEv("c-1", schema.StatusOK, ""))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id of a stopped task", cat(failed(), ev(stop, callEv("c-1", effect.Idempotent, true))),
			"event 5 (seq 5): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id retrying at the wrong seq", cat(failed(), ev(retryEv("c-1", effect.Idempotent, "c-1", 2))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id retrying with another tool", cat(failed(), ev(with(retryEv("c-1", effect.Idempotent, "c-1", 1), func(c *schema.Call) { c.Tool = "x.y" }))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id retrying itself", cat(failed(), ev(retryEv("c-1", effect.Idempotent, "c-1", 1))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id retrying another", cat(failed(), ev(keyed("c-2", "t-2", "op-2"), resultEv("c-2", schema.StatusFailed, ""), retryEv("c-1", effect.Idempotent, "c-1", 1))),
			"event 6 (seq 6): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id far back", cat(many(40), ev(keyed("m-3", "t-2", "op-2"), startedEv("m-3"))),
			"event 81 (seq 81): duplicate call_id \"m-3\" (first at seq 4)"},
		{"duplicate id, then a key reuse", cat(failed(), ev(keyed("c-1", "t-2", "op-2"), keyed("c-3", "t-1", "op-1"))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"duplicate id and key reuse at one event", cat(failed(), ev(callEv("c-1", effect.Idempotent, true))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
		{"key reuse, then a duplicate id", cat(failed(), ev(keyed("c-2", "t-1", "op-1"), keyed("c-1", "t-3", "op-3"))),
			"event 4 (seq 4): call \"c-2\" reuses operation key \"op-1\" of task \"t-1\", first used by call \"c-1\", without a retry link"},
		{"key reuse, then a second result", cat(failed(), ev(keyed("c-2", "t-1", "op-1"), resultEv("c-2", schema.StatusOK, ""), resultEv("c-2", schema.StatusOK, ""))),
			"event 4 (seq 4): call \"c-2\" reuses operation key \"op-1\" of task \"t-1\", first used by call \"c-1\", without a retry link"},
		{"key reuse, then its retry", cat(failed(), ev(keyed("c-2", "t-1", "op-1"), resultEv("c-2", schema.StatusFailed, ""), retryEv("c-3", effect.Idempotent, "c-2", 4))),
			"event 4 (seq 4): call \"c-2\" reuses operation key \"op-1\" of task \"t-1\", first used by call \"c-1\", without a retry link"},
		{"key reuse after a retry of the key", cat(failed(), ev(retryEv("c-2", effect.Idempotent, "c-1", 1), resultEv("c-2", schema.StatusOK, ""), keyed("c-3", "t-1", "op-1"))),
			"event 6 (seq 6): call \"c-3\" reuses operation key \"op-1\" of task \"t-1\", first used by call \"c-1\", without a retry link"},
		{"key reuse far back", cat(many(40), ev(keyed("c-9", "t-m", "op-m-7"))),
			"event 81 (seq 81): call \"c-9\" reuses operation key \"op-m-7\" of task \"t-m\", first used by call \"m-7\", without a retry link"},
		{"same key in another task", cat(failed(), ev(keyed("c-2", "t-2", "op-1"), keyed("c-3", "t-1", "op-2"), startedEv("c-9"))),
			"event 6 (seq 6): tool.started for call \"c-9\" without a prior tool.call"},
		{"started far back, then a result without call", cat(many(40), ev(resultEv("m-0", schema.StatusOK, ""))),
			"event 81 (seq 81): second tool.result for call \"m-0\" (first at seq 41)"},
		{"result without call after many", cat(many(40), ev(resultEv("m-40", schema.StatusOK, ""))),
			"event 81 (seq 81): tool.result for call \"m-40\" without a prior tool.call"},
		{"retry of a call far back", cat(many(40), ev(retryEv("c-2", effect.Idempotent, "m-5", 6))),
			"event 81 (seq 81): call \"c-2\" retries call \"m-5\", which completed (ok at seq 46): no plan is ever issued for a completed call"},
		{"retry of a call not in the history", cat(many(40), ev(retryEv("c-2", effect.Idempotent, "m-99", 6))),
			"event 81 (seq 81): call \"c-2\" retries call \"m-99\", which is not earlier in the history"},
		{"retry at the wrong seq", cat(failed(), ev(retryEv("c-2", effect.Idempotent, "c-1", 2))),
			"event 4 (seq 4): call \"c-2\" retries call \"c-1\" at prior_seq 2, but that call is at seq 1"},
		{"retry of itself", cat(failed(), ev(retryEv("c-2", effect.Idempotent, "c-2", 4))),
			"event 4 (seq 4): call \"c-2\" retries call \"c-2\", which is not earlier in the history"},
		{"call id too long after a duplicate", cat(failed(), ev(keyed("c-1", "t-2", "op-2"), callEv(long, effect.Idempotent, true))),
			"event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"},
	}
}

func TestInspectFirstError(t *testing.T) {
	for _, tc := range firstErrorCases() {
		t.Run(tc.name, func(t *testing.T) {
			for _, via := range []string{"events", "reader"} {
				h := hist(tc.events...)
				if via == "reader" {
					h = reader(jsonl(t, tc.events...))
				}
				_, err := recovery.Inspect(h, "c-1")
				var se *schema.Error
				if !errors.As(err, &se) || se.Code != schema.CodeCorruptHistory || se.Message != tc.msg {
					t.Errorf("%s: got %v, want corrupt_history %q", via, err, tc.msg)
				}
			}
		})
	}
}

// TestInspectFirstErrorBeforeSourceFailure: a duplicate earlier in the
// history is the answer also when the source fails later (a malformed
// line, an I/O error), as it is when the check is made at the event.
func TestInspectFirstErrorBeforeSourceFailure(t *testing.T) {
	for _, evs := range [][]schema.Event{
		append(failed(), callEv("c-1", effect.Idempotent, true)),
		append(failed(), with(callEv("c-2", effect.Idempotent, true), func(c *schema.Call) {})),
	} {
		want := "event 4 (seq 4): duplicate call_id \"c-1\" (first at seq 1)"
		if evs[3].Call.CallID == "c-2" {
			want = "event 4 (seq 4): call \"c-2\" reuses operation key \"op-1\" of task \"t-1\", first used by call \"c-1\", without a retry link"
		}
		bad := append(jsonl(t, evs...), "{\"v\":1,\n"...)
		src := func(yield func(schema.Event, error) bool) {
			for ev, err := range hist(evs...) {
				if !yield(ev, err) {
					return
				}
			}
			yield(schema.Event{}, errSource)
		}
		for via, h := range map[string]schema.History{"malformed line": reader(bad), "source error": src} {
			_, err := recovery.Inspect(h, "c-1")
			var se *schema.Error
			if !errors.As(err, &se) || se.Message != want {
				t.Errorf("%s: got %v, want %q", via, err, want)
			}
		}
	}
}

// TestInspectFirstErrorHashesCollide: with every id and key hash equal,
// the duplicate checks still tell calls apart by their ids, tasks and
// keys, and give the same answers; a valid history stays valid.
func TestInspectFirstErrorHashesCollide(t *testing.T) {
	defer recovery.CollideHashes()()
	for _, tc := range firstErrorCases() {
		_, err := recovery.Inspect(hist(tc.events...), "c-1")
		var se *schema.Error
		if !errors.As(err, &se) || se.Code != schema.CodeCorruptHistory || se.Message != tc.msg {
			t.Errorf("%s: got %v, want corrupt_history %q", tc.name, err, tc.msg)
		}
	}
	var evs []schema.Event
	for i := range 50 {
		id := fmt.Sprintf("c-%d", i)
		evs = append(evs, with(callEv(id, effect.Idempotent, true), func(c *schema.Call) { c.Operation.Key = "op-" + id }))
	}
	for i := range 50 {
		evs = append(evs, resultEv(fmt.Sprintf("c-%d", i), schema.StatusFailed, ""))
	}
	a, err := recovery.Inspect(hist(evs...), "c-7")
	if err != nil || a.CallID != "c-7" || a.Outcome != schema.OutcomeUncertain {
		t.Fatalf("valid history with colliding hashes: %+v %v", a, err)
	}
}
