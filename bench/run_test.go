package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs tiny versions of the in-process scenarios end to end on
// a real embedded server: every row must be there, carry figures from both
// sides, and have Met agree with its target.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := Run(ctx, Config{Quick: true, Rounds: 2, Scale: 0.02, Dir: t.TempDir(), Only: []string{"appends", "inspect", "issue", "classify"}})
	if err != nil {
		t.Fatalf("Run: %v\n%v", err, rs)
	}
	targets := map[string]Target{
		"append 1 session (sync=interval)":         appendTarget,
		"append 64 sessions (sync=interval)":       appendTarget,
		"plan issuance, 4 racing issuers":          issueTarget,
		"plan issuance: duplicate plans published": dupTarget,
	}
	var sawInspect, sawClassify, sawClassifyBare bool
	for _, r := range rs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Scenario, r.Error)
			continue
		}
		if r.Raw == nil {
			t.Errorf("%s: no raw figure", r.Scenario)
			continue
		}
		tg, ok := targets[r.Scenario]
		switch {
		case strings.HasPrefix(r.Scenario, "Inspect vs decode"):
			tg, ok, sawInspect = inspectTarget, true, true
		case strings.HasPrefix(r.Scenario, "recovery worker classification") && strings.HasSuffix(r.Scenario, "(raw stores as many assessments)"):
			tg, ok, sawClassify = classifyStoringTarget, true, true
		case strings.HasPrefix(r.Scenario, "recovery worker classification") && strings.HasSuffix(r.Scenario, "(raw only acks)"):
			tg, ok, sawClassifyBare = classifyBareTarget, true, true
		}
		if !ok {
			t.Errorf("unexpected row %q", r.Scenario)
			continue
		}
		delete(targets, r.Scenario)
		if r.Met != tg.Met(r.Jingwei, r.Ratio) {
			t.Errorf("%s: Met %v disagrees with its target %s", r.Scenario, r.Met, tg)
		}
		if strings.HasPrefix(r.Scenario, "plan issuance: duplicate") {
			if r.Jingwei != 0 || *r.Raw != 0 {
				t.Errorf("duplicates: jingwei %v raw %v, want 0", r.Jingwei, *r.Raw)
			}
			continue
		}
		if r.Jingwei <= 0 || *r.Raw <= 0 || r.Ratio == nil || *r.Ratio <= 0 {
			t.Errorf("%s: figures %v / %v / %v", r.Scenario, r.Jingwei, *r.Raw, r.Ratio)
		}
	}
	if len(targets) > 0 || !sawInspect || !sawClassify || !sawClassifyBare {
		t.Errorf("rows missing: %v inspect %v classify %v/%v", targets, sawInspect, sawClassify, sawClassifyBare)
	}
}

// TestRunScenarioError: a scenario that cannot run is reported in its rows
// and as ErrScenarioFailed, and the others still run.
func TestRunScenarioError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := Run(ctx, Config{Quick: true, Rounds: 1, Scale: 0.01, Dir: t.TempDir(), Only: []string{"inspect", "crash"}})
	if !errors.Is(err, ErrScenarioFailed) {
		t.Fatalf("Run: %v, want ErrScenarioFailed", err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d rows, want inspect + crash p50 + crash p99: %+v", len(rs), rs)
	}
	if rs[0].Error != "" {
		t.Errorf("inspect failed: %s", rs[0].Error)
	}
	for _, r := range rs[1:] {
		if r.Met || !strings.Contains(r.Error, ErrNoExecutable.Error()) {
			t.Errorf("crash row %+v: want Met false and the missing executable", r)
		}
	}
}

func TestRunInvalidConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Only: []string{"appends", "nope"}},
		{LeaseTTL: 500 * time.Millisecond},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Run(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
