package main

import (
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestHelpSpellsFlagsWithTwoDashes: every command's help names its flags
// as the README and the command's own text do (--json), never with the
// flag package's single dash, and gives a default at most once.
func TestHelpSpellsFlagsWithTwoDashes(t *testing.T) {
	single := regexp.MustCompile(`(?m)^  -[a-z]`)
	for name := range commands {
		_, out, errOut := runCLI("help", name)
		help := out + errOut
		if !strings.Contains(help, "jingwei "+name) {
			t.Errorf("help %s: no usage line:\n%s", name, help)
			continue
		}
		if single.MatchString(help) {
			t.Errorf("help %s lists a flag with one dash:\n%s", name, help)
		}
		for _, line := range strings.Split(help, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("help %s: two defaults for one flag: %q", name, line)
			}
		}
	}
	_, _, help := runCLI("help", "inspect")
	if !strings.Contains(help, "  --json\n") && !strings.Contains(help, "  --history string") {
		t.Errorf("help inspect does not list --history as --history:\n%s", help)
	}
}

func TestVersion(t *testing.T) {
	st, out, errb := runCLI("version")
	if st != exitOK || !strings.HasPrefix(out, "jingwei ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, "schema v1") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", st, out, errb)
	}
	st, out, _ = runCLI("version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); st != exitOK || err != nil || v.Schema != 1 || v.Go != runtime.Version() || v.Version == "" {
		t.Fatalf("version --json: exit %d, %q (%v)", st, out, err)
	}
	if st, _, _ := runCLI("version", "extra"); st != exitUsage {
		t.Fatalf("version extra: exit %d, want %d", st, exitUsage)
	}
}
