package recovery_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
)

// conformanceDir holds the protocol's shared conformance suite, relative to
// this package (see its README.md).
const conformanceDir = "../conformance"

// fixture is one conformance case.
type fixture struct {
	file          string
	Name          string                     `json:"name"`
	History       []json.RawMessage          `json:"history"`
	RawHistory    []string                   `json:"raw_history"`
	Call          string                     `json:"call"`
	Review        json.RawMessage            `json:"review"`
	ExpectInspect map[string]json.RawMessage `json:"expect_inspect"`
	ExpectPlan    map[string]json.RawMessage `json:"expect_plan"`
}

// loadFixtures reads every case in conformanceDir. No cases is a failure:
// the suite lives in the repository, so a missing folder is a broken
// checkout, not an optional extra.
func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(conformanceDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no conformance fixtures in %s", conformanceDir)
	}
	out := make([]fixture, 0, len(files))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f := fixture{file: file}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if f.Name == "" || f.Call == "" || f.ExpectInspect == nil || f.ExpectPlan == nil || f.History == nil {
			t.Fatalf("%s: fixture lacks name, history, call, expect_inspect or expect_plan", file)
		}
		out = append(out, f)
	}
	return out
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

// TestConformance runs every case of the shared suite through
// schema.DecodeHistory, Inspect and PrepareRetry (offline: the review as
// given, unsigned retries trusted).
func TestConformance(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			if base := strings.TrimSuffix(filepath.Base(f.file), ".json"); base != f.Name {
				t.Errorf("%s holds case %q", f.file, f.Name)
			}
			evs, decErr := schema.DecodeHistory(bytes.NewReader(f.historyBytes(t)), schema.DefaultLimits)
			var rev *schema.Review
			if len(f.Review) > 0 && string(f.Review) != "null" {
				r, err := recovery.DecodeReview(f.Review)
				if err != nil {
					t.Fatalf("review: %v", err)
				}
				rev = &r
			}
			var a schema.Assessment
			var p schema.Plan
			errI, errP := decErr, decErr
			if decErr == nil {
				a, errI = recovery.Inspect(schema.Events(evs), f.Call)
				p, errP = recovery.PrepareRetry(schema.Events(evs), f.Call, rev)
			}
			expect(t, "inspect", a, errI, f.ExpectInspect)
			expect(t, "plan", p, errP, f.ExpectPlan)
		})
	}
}

// expect compares a result (or error) with a case's expectation: the
// error code, or every listed field of the result's JSON.
func expect(t *testing.T, what string, got any, err error, want map[string]json.RawMessage) {
	t.Helper()
	if raw, ok := want["error"]; ok {
		var code schema.Code
		if jerr := json.Unmarshal(raw, &code); jerr != nil {
			t.Fatalf("%s: expected error code is not a string: %s", what, raw)
		}
		if schema.CodeOf(err) != code {
			t.Fatalf("%s: got %+v, %v; want error %s", what, got, err, code)
		}
		var se *schema.Error
		if !errors.As(err, &se) || strings.TrimSpace(se.Message) == "" {
			t.Errorf("%s: error %v has no message", what, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, _ := json.Marshal(got)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		g, ok := fields[name]
		if !ok {
			t.Errorf("%s: output lacks %q: %s", what, name, b)
			continue
		}
		var x, y any
		if json.Unmarshal(g, &x) != nil || json.Unmarshal(w, &y) != nil || !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %s = %s, want %s", what, name, g, w)
		}
	}
}
