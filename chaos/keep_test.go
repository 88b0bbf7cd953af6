package chaos

import (
	"os"
	"testing"
)

// TestKeepOnFailure: with KeepOnFailure the run's directory outlives a run
// whose must-hold invariant failed, or that did not complete, and the
// report names it; a run that passed leaves nothing behind. Keep keeps it
// whatever happened.
func TestKeepOnFailure(t *testing.T) {
	failed := []Row{{Name: "acknowledged requests lost", Must: true, Met: false}}
	passed := []Row{{Name: "acknowledged requests lost", Must: true, Met: true}, {Name: "crash -> first assessment p99", Met: false}}
	for _, tc := range []struct {
		name       string
		cfg        Config
		rows       []Row
		err        string
		wantKept   bool
		wantReport bool
	}{
		{"failed", Config{KeepOnFailure: true}, failed, "", true, true},
		{"did not complete", Config{KeepOnFailure: true}, nil, "setup: no quorum", true, true},
		{"passed (a bound missed is no failure)", Config{KeepOnFailure: true}, passed, "", false, false},
		{"not asked", Config{}, failed, "", false, false},
		{"kept always", Config{Keep: true}, passed, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := &harness{cfg: tc.cfg, dir: dir}
			rep := &Report{Rows: tc.rows, Error: tc.err}
			h.removeDir(rep)
			_, err := os.Stat(dir)
			if kept := err == nil; kept != tc.wantKept {
				t.Errorf("directory kept %v, want %v", kept, tc.wantKept)
			}
			if (rep.Dir == dir) != tc.wantReport {
				t.Errorf("report names %q, want it named: %v", rep.Dir, tc.wantReport)
			}
		})
	}
}
