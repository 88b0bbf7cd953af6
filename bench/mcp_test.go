package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunMCP: the mcp scenario runs (an MCP client through jingwei's MCP
// server, a tool worker and a Go SDK MCP server, against the same server
// called directly) and yields its six rows (the last, the CPU per call, on Unix) with figures on both sides;
// the latency rows are checked on what jingwei adds.
func TestRunMCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := Run(ctx, Config{Quick: true, Rounds: 1, Scale: 0.2, Dir: t.TempDir(), Only: []string{"mcp"}})
	if err != nil {
		t.Fatalf("Run: %v\n%v", err, rs)
	}
	if len(rs) != 6 {
		t.Fatalf("%d rows, want 6: %v", len(rs), rs)
	}
	for _, r := range rs {
		if r.Error != "" || !finite(r.Jingwei) || r.Jingwei <= 0 || r.Raw == nil || *r.Raw <= 0 || r.Ratio == nil {
			t.Errorf("row %q: %+v", r.Scenario, r)
			continue
		}
		if strings.Contains(r.Scenario, " ms ") && !strings.Contains(r.Scenario, "CPU") {
			want := r.Jingwei-*r.Raw <= map[bool]float64{true: 3, false: 15}[strings.Contains(r.Scenario, "p50")]
			if r.Met != want || !strings.HasPrefix(r.Target, "jingwei - raw <= ") {
				t.Errorf("%s: met %v, target %q, want met %v", r.Scenario, r.Met, r.Target, want)
			}
		}
	}
}
