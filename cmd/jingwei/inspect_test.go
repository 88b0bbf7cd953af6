package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/nats-io/nkeys"
)

const cliHistory = `{"v":1,"seq":1,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"tool.call","call":{"call_id":"c-1","tool":"payments.charge","arguments":{"qty":2,"sku":"A-1"},"start_marker":true,"operation":{"task":"t-1","key":"op-1","contract":{"effect":"non_idempotent","revision":"pay-v1"}}}}
{"v":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:02Z","type":"tool.started","started":{"call_id":"c-1"}}
{"v":1,"seq":3,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:03Z","type":"tool.result","result":{"call_id":"c-1","status":"timeout","retryable":false}}
{"v":1,"seq":4,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:04Z","type":"tool.call","call":{"call_id":"d-1","tool":"orders.create","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"op-2","contract":{"effect":"idempotent","revision":"o-v1"}}}}
{"v":1,"seq":5,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:05Z","type":"tool.result","result":{"call_id":"d-1","status":"failed","retryable":false}}
{"v":1,"seq":6,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:06Z","type":"tool.call","call":{"call_id":"d-2","tool":"orders.create","arguments":{},"start_marker":true,"operation":{"task":"t-1","key":"op-2","contract":{"effect":"idempotent","revision":"o-v1"},"retry":{"prior_call_id":"d-1","prior_seq":4,"plan_id":"p-x","basis":"uncertain_safe"}}}}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	st := run(context.Background(), args, &out, &errb)
	return st, out.String(), errb.String()
}

func TestInspectPlanCLI(t *testing.T) {
	hist := writeFile(t, "h.jsonl", cliHistory)
	corrupt := writeFile(t, "bad.jsonl", cliHistory+`{"v":1,"seq":6,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:07Z","type":"session.fenced","fence":{"epoch":2,"owner":"r"}}`+"\n")
	notJSON := writeFile(t, "nj.jsonl", "{\n")
	dupKeys := writeFile(t, "dup.jsonl", `{"v":1,"seq":1,"seq":2,"session":"s-1","epoch":1,"at":"2026-11-29T10:00:01Z","type":"x"}`+"\n")
	notExec := writeFile(t, "ok.review", `{"v":1,"session":"s-1","call_id":"c-1","operator":"alice@ops","evidence":"ticket-1","verdict":"not_executed"}`)
	malformed := writeFile(t, "bad.review", `{"v":1,"verdict":"completed","verdict":"not_executed"}`)
	otherCall := writeFile(t, "other.review", `{"v":1,"session":"s-1","call_id":"c-9","operator":"alice@ops","evidence":"ticket-1","verdict":"not_executed"}`)
	missing := filepath.Join(t.TempDir(), "missing.jsonl")

	tests := []struct {
		name   string
		args   []string
		status int
		// code is the error code on stdout (exit 3) or, for exit 0, a
		// field=value the output must contain
		want string
	}{
		{"inspect", []string{"inspect", "--history", hist, "--call", "c-1"}, exitOK, `"decision":"needs_review"`},
		{"inspect =flags", []string{"inspect", "--history=" + hist, "--call=d-2"}, exitOK, `"chain":["d-1","d-2"]`},
		{"inspect unknown call", []string{"inspect", "--history", hist, "--call", "c-9"}, exitRefused, "unknown_call"},
		{"inspect superseded", []string{"inspect", "--history", hist, "--call", "d-1"}, exitRefused, "superseded_call"},
		{"inspect corrupt", []string{"inspect", "--history", corrupt, "--call", "c-1"}, exitRefused, "corrupt_history"},
		{"inspect not JSON", []string{"inspect", "--history", notJSON, "--call", "c-1"}, exitRefused, "corrupt_history"},
		{"inspect duplicate member names", []string{"inspect", "--history", dupKeys, "--call", "c-1"}, exitRefused, "corrupt_history"},
		{"inspect empty file", []string{"inspect", "--history", writeFile(t, "e", ""), "--call", "c-1"}, exitRefused, "unknown_call"},
		{"plan needs review", []string{"plan", "--history", hist, "--call", "c-1"}, exitRefused, "needs_review"},
		{"plan with review", []string{"plan", "--history", hist, "--call", "c-1", "--review", notExec}, exitOK, `"basis":"reviewed_not_executed"`},
		{"plan uncertain safe", []string{"plan", "--history", hist, "--call", "d-2"}, exitOK, `"prior_call_id":"d-2"`},
		{"plan malformed review", []string{"plan", "--history", hist, "--call", "c-1", "--review", malformed}, exitRefused, "invalid_review"},
		{"plan review of other call", []string{"plan", "--history", hist, "--call", "c-1", "--review", otherCall}, exitRefused, "invalid_review"},
		{"plan corrupt history before bad review", []string{"plan", "--history", corrupt, "--call", "c-1", "--review", malformed}, exitRefused, "corrupt_history"},
		{"plan superseded", []string{"plan", "--history", hist, "--call", "d-1"}, exitRefused, "superseded_call"},

		{"inspect missing --history", []string{"inspect", "--call", "c-1"}, exitUsage, "--history"},
		{"inspect missing --call", []string{"inspect", "--history", hist}, exitUsage, "--call"},
		{"inspect unknown flag", []string{"inspect", "--history", hist, "--call", "c-1", "--nope"}, exitUsage, "nope"},
		{"inspect stray argument", []string{"inspect", "--history", hist, "--call", "c-1", "extra"}, exitUsage, "extra"},
		{"inspect missing file", []string{"inspect", "--history", missing, "--call", "c-1"}, exitUsage, "cannot open history"},
		{"inspect directory", []string{"inspect", "--history", t.TempDir(), "--call", "c-1"}, exitUsage, "directory"},
		{"plan missing --call", []string{"plan", "--history", hist}, exitUsage, "--call"},
		{"plan missing review file", []string{"plan", "--history", hist, "--call", "c-1", "--review", missing}, exitUsage, "cannot open review"},
		{"plan missing history file", []string{"plan", "--history", missing, "--call", "c-1"}, exitUsage, "cannot open history"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, out, errOut := runCLI(tc.args...)
			if st != tc.status {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", st, tc.status, out, errOut)
			}
			switch tc.status {
			case exitUsage:
				if out != "" {
					t.Errorf("usage error printed on stdout: %s", out)
				}
				if !strings.Contains(errOut, tc.want) {
					t.Errorf("stderr %q does not mention %q", errOut, tc.want)
				}
			case exitRefused:
				var e struct {
					Error schema.ErrorDetail `json:"error"`
				}
				if err := json.Unmarshal([]byte(out), &e); err != nil || strings.Count(out, "\n") != 1 {
					t.Fatalf("stdout is not one JSON line: %q (%v)", out, err)
				}
				if string(e.Error.Code) != tc.want || e.Error.Message == "" {
					t.Errorf("error %+v, want code %s", e.Error, tc.want)
				}
				if tc.want == "superseded_call" && e.Error.Latest != "d-2" {
					t.Errorf("latest = %q, want d-2", e.Error.Latest)
				}
			case exitOK:
				var m map[string]any
				if err := json.Unmarshal([]byte(out), &m); err != nil || strings.Count(out, "\n") != 1 {
					t.Fatalf("stdout is not one JSON line: %q (%v)", out, err)
				}
				if !strings.Contains(out, tc.want) {
					t.Errorf("output %s lacks %s", out, tc.want)
				}
			}
		})
	}
}

func TestInspectPlanHelp(t *testing.T) {
	for _, cmd := range []string{"inspect", "plan"} {
		for _, args := range [][]string{{cmd, "--help"}, {"help", cmd}} {
			st, out, errOut := runCLI(args...)
			if st != exitOK {
				t.Errorf("%v: exit %d", args, st)
			}
			help := out + errOut
			for _, want := range []string{"--history", "--call", "Exit status", "0 ", "2 ", "3 ", "corrupt_history"} {
				if !strings.Contains(help, want) {
					t.Errorf("%v: help lacks %q:\n%s", args, want, help)
				}
			}
			if cmd == "plan" && !strings.Contains(help, "--review") {
				t.Errorf("plan help lacks --review")
			}
		}
	}
	_, out, _ := runCLI("help")
	if !strings.Contains(out, "inspect") || !strings.Contains(out, "plan") {
		t.Errorf("command list lacks inspect/plan:\n%s", out)
	}
}

// TestInspectVerifiesRetries: with --trust-planners, inspect verifies every
// retry of a history offline: a retry carrying the plan a trusted planner
// signed passes and the call classifies; the same history with the retry's
// signature from another key, or with none (a retry written by anything but
// jingwei), is refused with unauthorized_retry.
func TestInspectVerifiesRetries(t *testing.T) {
	dir := t.TempDir()
	first := []schema.Event{
		{V: 1, Seq: 1, Session: "s-1", Epoch: 1, At: time.Date(2026, 11, 29, 10, 0, 1, 0, time.UTC), Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1"}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "o-v1"}}}},
		{V: 1, Seq: 2, Session: "s-1", Epoch: 1, At: time.Date(2026, 11, 29, 10, 0, 2, 0, time.UTC), Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed}},
	}
	plan, err := recovery.PrepareRetry(schema.Events(first), "c-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	planner, _ := nkeys.CreateUser()
	mallory, _ := nkeys.CreateUser()
	history := func(signer nkeys.KeyPair) string {
		p := plan
		if signer != nil {
			if p, err = recovery.SignPlan(signer, plan); err != nil {
				t.Fatal(err)
			}
		}
		retry := schema.Event{V: 1, Seq: 3, Session: "s-1", Epoch: 1, At: time.Date(2026, 11, 29, 10, 0, 3, 0, time.UTC), Type: schema.TypeCall, Call: &schema.Call{CallID: "c-2", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A-1"}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: p.Contract,
				Retry: &schema.RetryLink{PriorCallID: "c-1", PriorSeq: 1, PlanID: p.PlanID, Basis: p.Basis, IssuedAt: p.IssuedAt, Signer: p.Signer, Sig: p.Sig}}}}
		var b bytes.Buffer
		if err := schema.WriteHistory(&b, append(append([]schema.Event{}, first...), retry)); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	pub, _ := planner.PublicKey()
	planners := filepath.Join(dir, "planners")
	if err := os.WriteFile(planners, []byte(pub+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		signer nkeys.KeyPair
		status int
		want   string
	}{
		{"signed by the planner", planner, exitOK, `"decision":"retry_allowed"`},
		{"signed by another key", mallory, exitRefused, `"code":"unauthorized_retry"`},
		{"not signed", nil, exitRefused, `"code":"unauthorized_retry"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := writeFile(t, "h.jsonl", history(tc.signer))
			st, out, errOut := runCLI("inspect", "--history", h, "--call", "c-2", "--trust-planners", planners)
			if st != tc.status || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, stdout %s, stderr %s; want %d with %s", st, out, errOut, tc.status, tc.want)
			}
			// Without keys the history classifies as it is.
			if st, out, _ := runCLI("inspect", "--history", h, "--call", "c-2"); st != exitOK || !strings.Contains(out, `"decision":"retry_allowed"`) {
				t.Fatalf("without keys: exit %d %s", st, out)
			}
		})
	}
	if st, _, _ := runCLI("inspect", "--history", writeFile(t, "x", ""), "--call", "c-2", "--trust-reviewers", planners); st != exitUsage {
		t.Fatalf("--trust-reviewers alone: exit %d, want 2", st)
	}
}
