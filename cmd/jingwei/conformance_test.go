package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// conformanceDir is the repository's conformance suite (conformance/ at
// the root), which every implementation of the protocol runs.
const conformanceDir = "../../conformance"

// fixture is one conformance case; see conformance/README.md.
type fixture struct {
	Name          string                     `json:"name"`
	History       []json.RawMessage          `json:"history"`
	RawHistory    []string                   `json:"raw_history"`
	Call          string                     `json:"call"`
	Review        json.RawMessage            `json:"review"`
	ExpectInspect map[string]json.RawMessage `json:"expect_inspect"`
	ExpectPlan    map[string]json.RawMessage `json:"expect_plan"`
}

// loadFixtures returns the fixture files; an empty or missing folder fails
// the test.
func loadFixtures(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(conformanceDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no conformance fixtures in %s", conformanceDir)
	}
	return files
}

func readFixture(t testing.TB, file string) fixture {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if f.Call == "" || f.ExpectInspect == nil || f.ExpectPlan == nil {
		t.Fatalf("%s: fixture lacks call, expect_inspect or expect_plan", file)
	}
	return f
}

// historyBytes renders the fixture's history as JSON Lines: raw_history
// verbatim first, then one compact event per line.
func (f fixture) historyBytes(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, l := range f.RawHistory {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	for _, ev := range f.History {
		if err := json.Compact(&buf, ev); err != nil {
			t.Fatalf("%s: history event: %v", f.Name, err)
		}
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

func TestConformance(t *testing.T) {
	for _, file := range loadFixtures(t) {
		f := readFixture(t, file)
		t.Run(f.Name, func(t *testing.T) {
			dir := t.TempDir()
			hist := filepath.Join(dir, "history.jsonl")
			if err := os.WriteFile(hist, f.historyBytes(t), 0o600); err != nil {
				t.Fatal(err)
			}
			checkRun(t, "inspect", []string{"inspect", "--history", hist, "--call", f.Call}, f.ExpectInspect)

			args := []string{"plan", "--history", hist, "--call", f.Call}
			if len(f.Review) > 0 && string(f.Review) != "null" {
				rev := filepath.Join(dir, "review.json")
				if err := os.WriteFile(rev, f.Review, 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--review", rev)
			}
			checkRun(t, "plan", args, f.ExpectPlan)
		})
	}
}

// checkRun runs the CLI and compares the exit status and the expected
// fields (or error code) with its output.
func checkRun(t *testing.T, what string, args []string, expect map[string]json.RawMessage) {
	t.Helper()
	var out, errb bytes.Buffer
	status := run(context.Background(), args, &out, &errb)
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%s: exit %d, stdout is not one JSON object: %v\nstdout: %s\nstderr: %s", what, status, err, out.String(), errb.String())
	}
	if code, ok := expect["error"]; ok {
		var want string
		if err := json.Unmarshal(code, &want); err != nil {
			t.Fatalf("%s: expected error code is not a string: %s", what, code)
		}
		var body struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if e, ok := got["error"]; !ok || json.Unmarshal(e, &body) != nil {
			t.Fatalf("%s: want error %s (exit 3), got exit %d: %s", what, want, status, out.String())
		}
		if status != exitRefused || body.Code != want {
			t.Errorf("%s: want error %s (exit 3), got %s (exit %d): %s", what, want, body.Code, status, body.Message)
		}
		if strings.TrimSpace(body.Message) == "" {
			t.Errorf("%s: error %s has an empty message", what, body.Code)
		}
		return
	}
	if status != exitOK {
		t.Fatalf("%s: want exit 0, got %d: %s%s", what, status, out.String(), errb.String())
	}
	for field, want := range expect {
		g, ok := got[field]
		if !ok {
			t.Errorf("%s: output lacks %q: %s", what, field, out.String())
			continue
		}
		if !jsonEqual(t, g, want) {
			t.Errorf("%s: %s = %s, want %s", what, field, g, want)
		}
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
