package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
)

// TestExportThenInspect records a failed call of an idempotent tool on a
// live server, exports the session and inspects the export offline: the
// history passes inspection and the call is retry_allowed.
func TestExportThenInspect(t *testing.T) {
	ctx := context.Background()
	srv, _, topo := streamtest.Start(t)
	l, err := topo.Logs().Fence(ctx, "s-1", "w1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []schema.Event{
		{Type: schema.TypeCall, Call: &schema.Call{CallID: "c-1", Tool: "orders.create", Arguments: json.RawMessage(`{"sku":"A","qty":1}`), StartMarker: true,
			Operation: &schema.Operation{Task: "t-1", Key: "op-1", Contract: effect.Contract{Effect: effect.Idempotent, Revision: "orders-v1"}}}},
		{Type: schema.TypeStarted, Started: &schema.Started{CallID: "c-1"}},
		{Type: schema.TypeResult, Result: &schema.Result{CallID: "c-1", Status: schema.StatusFailed, Retryable: true, Error: "boom"}},
	} {
		if _, err := l.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "s-1.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"export", "--server", srv.ClientURL(), "--session", "s-1", "--out", file}, &stdout, &stderr); code != exitOK {
		t.Fatalf("export: %d %s %s", code, stdout.String(), stderr.String())
	}
	b, _ := os.ReadFile(file)
	if n := strings.Count(string(b), "\n"); n != 4 {
		t.Fatalf("export has %d lines:\n%s", n, b)
	}
	if !strings.Contains(string(b), `"seq":1,`) {
		t.Fatalf("export lacks seq:\n%s", b)
	}

	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--history", file, "--call", "c-1"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect: %d %s %s", code, stdout.String(), stderr.String())
	}
	var a schema.Assessment
	if err := json.Unmarshal(stdout.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schema.OutcomeUncertain || a.Decision != schema.DecisionRetryAllowed || a.Evidence != "failed" {
		t.Fatalf("assessment %+v", a)
	}

	// inspect and plan load the session from the server themselves.
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--server", srv.ClientURL(), "--session", "s-1", "--call", "c-1"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("inspect --session: %d %s %s", code, stdout.String(), stderr.String())
	}
	var live schema.Assessment
	if err := json.Unmarshal(stdout.Bytes(), &live); err != nil || live.Decision != a.Decision || live.CallID != "c-1" {
		t.Fatalf("inspect --session: %+v %v", live, err)
	}
	stdout.Reset()
	if code := run(ctx, []string{"plan", "--server", srv.ClientURL(), "--session", "s-1", "--call", "c-1"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("plan --session: %d %s %s", code, stdout.String(), stderr.String())
	}
	var p schema.Plan
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil || p.Key != "op-1" || p.PriorCallID != "c-1" || p.Basis != schema.BasisUncertainSafe {
		t.Fatalf("plan --session: %+v %v", p, err)
	}
	for _, args := range [][]string{
		{"inspect", "--server", srv.ClientURL(), "--session", "s-1", "--history", file, "--call", "c-1"},
		{"inspect", "--server", srv.ClientURL(), "--session", "a.b", "--call", "c-1"},
	} {
		if code := run(ctx, args, &stdout, &stderr); code != exitUsage {
			t.Fatalf("%v: exit %d, want usage", args, code)
		}
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--server", "nats://127.0.0.1:1", "--session", "s-1", "--call", "c-1"}, &stdout, &stderr); code != exitUnreachable || !strings.Contains(stdout.String(), `"unreachable"`) {
		t.Fatalf("inspect --session without a server: %d %s", code, stdout.String())
	}

	// The same history to stdout.
	stdout.Reset()
	if code := run(ctx, []string{"export", "--server", srv.ClientURL(), "--session", "s-1"}, &stdout, &stderr); code != exitOK || stdout.String() != string(b) {
		t.Fatalf("export to stdout: %d\n%s\nwant\n%s", code, stdout.String(), b)
	}
}

func TestExportErrors(t *testing.T) {
	ctx := context.Background()
	srv, _, _ := streamtest.Start(t)
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no session", []string{"export", "--server", srv.ClientURL()}, exitUsage},
		{"bad session", []string{"export", "--server", srv.ClientURL(), "--session", "a.b"}, exitUsage},
		{"unknown session", []string{"export", "--server", srv.ClientURL(), "--session", "nobody"}, exitRefused},
		{"other prefix", []string{"export", "--server", srv.ClientURL(), "--session", "s-1", "--prefix", "zz"}, exitFailure},
		{"no server", []string{"export", "--server", "nats://127.0.0.1:1", "--session", "s-1"}, exitUnreachable},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(ctx, c.args, &stdout, &stderr); code != c.code {
			t.Errorf("%s: exit %d, want %d (%s %s)", c.name, code, c.code, stdout.String(), stderr.String())
		}
	}
}
