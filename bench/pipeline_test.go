package bench

import (
	"context"
	"strings"
	"testing"
)

// TestRunPipeline: the pipeline scenario runs in both durability modes
// and yields its rows with figures, and a pipeline call makes at most 3
// durable writes with sync=always: the tool.call, the tool.result, and
// with so few calls a large share of each session's fence and of the
// lease renewals. The request queue on one server flushes asynchronously
// (its store and its removal were two more, 4.1 a call in a full run);
// strace -y of a 500-call run on one session counted 2.14 fsyncs a call,
// all on the events stream but the budget's and the leases' 0.14.
func TestRunPipeline(t *testing.T) {
	rs, err := Run(context.Background(), Config{Rounds: 1, Scale: 0.1, Dir: t.TempDir(), Only: []string{"pipeline"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 17 {
		t.Fatalf("%d rows, want 17 (8 per mode and the durable writes)", len(rs))
	}
	for _, r := range rs {
		if r.Error != "" || !finite(r.Jingwei) || r.Jingwei <= 0 || r.Raw == nil || *r.Raw <= 0 {
			t.Errorf("row %q: %+v", r.Scenario, r)
		}
		if strings.Contains(r.Scenario, "durable writes") {
			t.Logf("%s: %.2f", r.Scenario, r.Jingwei)
		}
		if strings.Contains(r.Scenario, "durable writes") && r.Jingwei > 3 {
			t.Errorf("%s: %.2f per call, want at most 3", r.Scenario, r.Jingwei)
		}
	}
}
