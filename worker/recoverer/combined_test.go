package recoverer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// TestCombinedFormSameVerdict: calls recorded in the combined form
// (call.started: a tool.call and its tool.started in one event) and in the
// three-event form, closed by their result or by a takeover's fence, are
// assessed by the incremental classifier exactly as recovery.Inspect
// assesses them on the history as it stood; a combined call closed by a
// fence without a result is uncertain (no_result), never not_started, and
// a marker call without tool.started stays not_started. A combined call is
// listed as started among the open calls, and never as one that may still
// ask for approval.
func TestCombinedFormSameVerdict(t *testing.T) {
	ev := func(seq int, epoch uint64, body string) string {
		return fmt.Sprintf(`{"v":1,"seq":%d,"session":"s-1","epoch":%d,"at":"2026-11-30T10:00:%02dZ",%s}`, seq, epoch, seq, body)
	}
	callBody := func(id, effect, flags string) string {
		return `"type":"tool.call","call":{"call_id":"` + id + `","tool":"t","arguments":{},` + flags +
			`,"operation":{"task":"t-1","key":"k-` + id + `","contract":{"effect":"` + effect + `","revision":"v1"}}}`
	}
	const combined, marker = `"start_marker":false,"started":true`, `"start_marker":true`
	lines := []string{
		ev(1, 1, callBody("c-1", "idempotent", combined)),
		ev(2, 1, `"type":"tool.result","result":{"call_id":"c-1","status":"ok","retryable":false}`),
		ev(3, 1, callBody("c-2", "non_idempotent", combined)),
		ev(4, 1, `"type":"tool.result","result":{"call_id":"c-2","status":"failed","retryable":true}`),
		ev(5, 1, callBody("c-3", "idempotent", combined)),     // open at the fence
		ev(6, 1, callBody("c-4", "non_idempotent", combined)), // open at the fence
		ev(7, 1, callBody("c-5", "non_idempotent", marker)),   // open, not started
		ev(8, 1, callBody("c-6", "non_idempotent", marker)),
		ev(9, 1, `"type":"tool.started","started":{"call_id":"c-6"}`), // open, started
		ev(10, 1, callBody("c-7", "unknown", `"started":true`)),       // open, no start_marker member
		ev(11, 2, `"type":"session.fenced","fence":{"epoch":2,"owner":"recoverer-a"}`),
	}
	want := map[string][3]string{
		"c-1": {"completed", "ok", "refuse"},
		"c-2": {"uncertain", "failed", "needs_review"},
		"c-3": {"uncertain", recovery.EvidenceNoResult, "retry_allowed"},
		"c-4": {"uncertain", recovery.EvidenceNoResult, "needs_review"},
		"c-5": {"not_started", recovery.EvidenceNotStartedMarker, "retry_allowed"},
		"c-6": {"uncertain", recovery.EvidenceNoResult, "needs_review"},
		"c-7": {"uncertain", recovery.EvidenceNoResult, "needs_review"},
	}
	tr := newTracker()
	got := map[string]schema.Assessment{}
	for i, l := range lines {
		found, err := tr.observe("s-1", uint64(i+1), []byte(l), nil)
		if err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
		if i == 6 {
			// Before the fence: the classifier's list of calls that may
			// still ask for approval holds the marker calls only.
			tr.approvals.mu.Lock()
			asking := tr.approvals.calls
			tr.approvals.mu.Unlock()
			for _, id := range []string{"c-3", "c-4"} {
				if _, ok := asking[callKey{"s-1", id}]; ok {
					t.Errorf("combined call %s tracked as one that may still ask for approval", id)
				}
			}
			if _, ok := asking[callKey{"s-1", "c-5"}]; !ok {
				t.Error("marker call c-5 not tracked as one that may ask for approval")
			}
			// jw.api.status lists a combined call as started.
			for _, c := range tr.list("s-1") {
				if (c.CallID == "c-3" || c.CallID == "c-4") != c.Started {
					t.Errorf("open call %s listed with started %v", c.CallID, c.Started)
				}
			}
		}
		for _, f := range found {
			if !f.ready {
				t.Fatalf("event %d: %s not assessed incrementally", i+1, f.callID)
			}
			w, err := recovery.Inspect(schema.NewHistoryReader(strings.NewReader(strings.Join(lines[:i+1], "\n")), schema.Limits{}).All(), f.callID)
			if err != nil {
				t.Fatalf("Inspect %s: %v", f.callID, err)
			}
			assertSame(t, f.a, w)
			got[f.callID] = f.a
		}
	}
	for id, w := range want {
		a, ok := got[id]
		if !ok {
			t.Fatalf("%s never assessed", id)
		}
		if string(a.Outcome) != w[0] || a.Evidence != w[1] || string(a.Decision) != w[2] {
			t.Errorf("%s assessed %s/%s/%s, want %v", id, a.Outcome, a.Evidence, a.Decision, w)
		}
	}
	if _, open := tr.counts(); open != 0 {
		t.Fatalf("%d calls still tracked after the fence", open)
	}
}

// TestMisorderedCallCorruptsSession: a call already started — by its
// tool.call in the combined form, or by a tool.started — that gets a
// second start, an approval request or a rejection makes its history
// corrupt, for the incremental classifier exactly as for Inspect: the
// classifier reports corrupt_history at that event, drops the session's
// open calls and assesses nothing more of it (not even the call's later
// result), where Inspect answers corrupt_history.
func TestMisorderedCallCorruptsSession(t *testing.T) {
	ev := func(seq int, body string) string {
		return fmt.Sprintf(`{"v":1,"seq":%d,"session":"s-1","epoch":1,"at":"2026-11-30T10:00:%02dZ",%s}`, seq, seq, body)
	}
	call := func(flags string) string {
		return `"type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},` + flags +
			`,"operation":{"task":"t-1","key":"k-1","contract":{"effect":"idempotent","revision":"v1"}}}`
	}
	const combined, marker = `"start_marker":false,"started":true`, `"start_marker":true`
	started := `"type":"tool.started","started":{"call_id":"c-1"}`
	asks := `"type":"approval.requested","approval_request":{"call_id":"c-1","deadline":"2026-11-30T11:00:00Z"}`
	rejected := `"type":"tool.result","result":{"call_id":"c-1","status":"rejected","stage":"guard","retryable":false}`
	ok := `"type":"tool.result","result":{"call_id":"c-1","status":"ok","retryable":false}`
	cases := map[string][]string{
		"combined, then tool.started":       {call(combined), started},
		"combined, then approval.requested": {call(combined), asks},
		"combined, then rejected":           {call(combined), rejected},
		"started twice":                     {call(marker), started, started},
		"tool.started, then approval asked": {call(marker), started, asks},
		"tool.started, then rejected":       {call(marker), started, rejected},
	}
	for name, bodies := range cases {
		t.Run(name, func(t *testing.T) {
			var lines []string
			for i, b := range bodies {
				lines = append(lines, ev(i+1, b))
			}
			tr := newTracker()
			for i, l := range lines {
				found, err := tr.observe("s-1", uint64(i+1), []byte(l), nil)
				last := i == len(lines)-1
				if !last && (err != nil || len(found) > 0) {
					t.Fatalf("event %d: %v %v, want it taken", i+1, found, err)
				}
				if last && schema.CodeOf(err) != schema.CodeCorruptHistory {
					t.Fatalf("event %d: %v, want corrupt_history", i+1, err)
				}
			}
			if _, err := recovery.Inspect(schema.NewHistoryReader(strings.NewReader(strings.Join(lines, "\n")), schema.Limits{}).All(), "c-1"); schema.CodeOf(err) != schema.CodeCorruptHistory {
				t.Fatalf("Inspect: %v, want corrupt_history (the classifier must agree with it)", err)
			}
			if _, open := tr.counts(); open != 0 {
				t.Fatalf("%d calls still tracked in a corrupt session", open)
			}
			found, err := tr.observe("s-1", uint64(len(lines)+1), []byte(ev(len(lines)+1, ok)), nil)
			if err != nil || len(found) > 0 {
				t.Fatalf("the call's result after the corruption: %v %v, want nothing assessed", found, err)
			}
		})
	}
}
