package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

// TestInspectUnknownEnumValues feeds `jingwei inspect` and `jingwei plan`
// histories whose one event carries a value no table declares — an
// effect, a result status, an admission stage — and requires corrupt_history (exit 3, one JSON line), never a panic or
// a classification. The same history with the declared value is
// classified, so the refusal is the value's.
func TestInspectUnknownEnumValues(t *testing.T) {
	const call = `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"t","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"EFFECT","revision":"r1"}}}}`
	const result = `{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"tool.result","result":{"call_id":"c-1","status":"STATUS","retryable":false,"stage":"STAGE"}}`
	const typed = `{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"TYPE","started":{"call_id":"c-1"}}`
	history := func(effect, status, stage string) string {
		r := strings.NewReplacer("EFFECT", effect, "STATUS", status, "STAGE", stage)
		return r.Replace(call) + "\n" + r.Replace(result) + "\n"
	}
	withType := func(typ string) string {
		return strings.Replace(call, "EFFECT", "idempotent", 1) + "\n" + strings.Replace(typed, "TYPE", typ, 1) + "\n"
	}
	for _, tc := range []struct {
		name, known, unknown string
	}{
		{"effect", history("non_idempotent", "timeout", ""), history("replayable", "timeout", "")},
		{"status", history("idempotent", "timeout", ""), history("idempotent", "deferred", "")},
		{"stage", history("idempotent", "rejected", "guard"), history("idempotent", "rejected", "quota")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			known := writeFile(t, "known.jsonl", tc.known)
			if st, out, errOut := runCLI("inspect", "--history", known, "--call", "c-1"); st != exitOK {
				t.Fatalf("declared value: exit %d, want %d\nstdout: %s\nstderr: %s", st, exitOK, out, errOut)
			}
			unknown := writeFile(t, "unknown.jsonl", tc.unknown)
			for _, cmd := range []string{"inspect", "plan"} {
				st, out, errOut := runCLI(cmd, "--history", unknown, "--call", "c-1")
				var e struct {
					Error schema.ErrorDetail `json:"error"`
				}
				if st != exitRefused || json.Unmarshal([]byte(out), &e) != nil || e.Error.Code != schema.CodeCorruptHistory {
					t.Errorf("%s with an undeclared %s: exit %d, stdout %q, stderr %q; want exit %d with corrupt_history", cmd, tc.name, st, out, errOut, exitRefused)
				}
			}
		})
	}
	// An event type no table declares is carried through and ignored,
	// with or without a body (docs/protocol.md §5): the tool.started body
	// on it does not count as the call's start.
	for _, typ := range []string{"call.noted", "tool.started"} {
		h := writeFile(t, "typed.jsonl", withType(typ))
		st, out, errOut := runCLI("inspect", "--history", h, "--call", "c-1")
		want := `"evidence":"not_started_marker"`
		if typ == "tool.started" {
			want = `"evidence":"no_result"`
		}
		if st != exitOK || !strings.Contains(out, want) {
			t.Errorf("type %s with a started body: exit %d, %s %s; want %s", typ, st, out, errOut, want)
		}
	}
}
