package bench

import (
	"context"
	"strings"
	"testing"
)

// TestRunPipeline: the pipeline scenario runs in both durability modes
// and yields its rows with figures, and a pipeline call makes at most 5.5
// durable writes with sync=always: the request, its removal from the work
// queue, the tool.call, the tool.result, and with so few calls a large
// share of each session's fence and of the lease renewals (4.15 in a full
// run; 6.4 there while the request consumers kept their state on file).
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
		if strings.Contains(r.Scenario, "durable writes") && r.Jingwei > 5.5 {
			t.Errorf("%s: %.2f per call, want at most 5.5", r.Scenario, r.Jingwei)
		}
	}
}
