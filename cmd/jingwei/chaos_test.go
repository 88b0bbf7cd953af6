package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/chaos"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

func TestChaosUsage(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--single", "--server", "nats://127.0.0.1:1"},
		{"chaos", "--server", "nats://127.0.0.1:1"},
		{"chaos", "--auth", "dir"},
		{"chaos", "--operator"},
		{"chaos", "--kill-every", "3s-1s"},
		{"chaos", "--kill-every", "soon"},
		{"chaos", "--lease-ttl", "500ms"},
		{"chaos", "--nodes", "2"},
		{"chaos", "--sync", "sometimes"},
		{"chaos", "--bogus"},
		{"chaos", "stray"},
		{"chaos", "node", "--name", "n0"}, // no dir, listen, auth
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %s)", args, code, exitUsage, errb.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"help", "chaos"}, &out, &out); code != exitOK || !bytes.Contains(out.Bytes(), []byte("--recoverer-kills")) {
		t.Errorf("help chaos: %d %s", code, out.String())
	}
}

func TestParseRange(t *testing.T) {
	for in, want := range map[string][2]time.Duration{"1.5s-4s": {1500 * time.Millisecond, 4 * time.Second}, "2s": {2 * time.Second, 2 * time.Second}} {
		got, off, err := parseRange(in)
		if err != nil || off || got != want {
			t.Errorf("%s: %v %v %v", in, got, off, err)
		}
	}
	if _, off, err := parseRange("0"); err != nil || !off {
		t.Errorf("0: %v %v", off, err)
	}
}

// TestChaosNodeFlagsRoundTrip: the hidden node command parses back exactly
// the command line the harness writes.
func TestChaosNodeFlagsRoundTrip(t *testing.T) {
	want := chaos.NodeConfig{Name: "n1", Dir: "/d/n1", Listen: "127.0.0.1:4001", AuthDir: "/d/auth", Sync: natsnode.SyncAlways,
		ClusterName: "c", ClusterListen: "127.0.0.1:5001", Routes: []string{"nats-route://127.0.0.1:6001", "nats-route://127.0.0.1:6002"},
		ClusterAdvertise: "127.0.0.1:7000"}
	args := want.Args()
	got, _, _, ok := parseChaosNode(args[2:], io.Discard)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

// chaosReport is the part of `jingwei chaos --json` the test reads.
type chaosReport struct {
	Seed  int64    `json:"seed"`
	Error string   `json:"error"`
	Dir   string   `json:"dir"`
	Notes []string `json:"notes"`
	Ex    struct {
		WorkerKills    int            `json:"worker_kills"`
		RecovererKills int            `json:"recoverer_kills"`
		NodeKills      int            `json:"node_kills"`
		Partitions     int            `json:"partitions"`
		LeftOpen       int            `json:"calls_left_open_by_kills"`
		PlansRun       int            `json:"plans_run"`
		Reviews        map[string]int `json:"reviews_signed"`
		ByProbes       map[string]int `json:"settled_by_probes"`
		Undecided      int            `json:"probes_undecided"`
		Calls          int            `json:"calls"`
	} `json:"exercised"`
	Latency struct {
		Samples int `json:"samples"`
	} `json:"latency"`
}

// TestChaosQuick runs `jingwei chaos --quick --single` (the command in this
// process, its child processes the real binary) and checks the report's shape
// and that the run really exercised its faults: workers and the recovery
// worker were killed, a kill left a call open, a plan ran, a review was
// signed (by a person, or by the recovery worker's prober), every must-hold row holds (nothing ran twice, nothing was lost or
// forgotten, no assessment was wrong) and the exit status agrees.
// JINGWEI_CHAOS_CLUSTER=1 also runs the quick 3-node cluster run, with its
// node kill and partition (about a minute more; .ci/run runs it as its own
// step).
func TestChaosQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a chaos run of a minute or more")
	}
	bin := filepath.Join(t.TempDir(), "jingwei")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// mcp: the same single-node run with the tool workers running the
	// example tools behind an MCP backend (docs/chaos-mcp-tools.yaml:
	// 'jingwei tools serve-examples' as a stdio MCP server).
	modes := []string{"--single", "--single --tools " + filepath.Join("..", "..", "docs", "chaos-mcp-tools.yaml")}
	if os.Getenv("JINGWEI_CHAOS_CLUSTER") == "1" {
		modes = append(modes, "") // the default: a 3-node cluster
	}
	for _, mode := range modes {
		name := "single"
		switch {
		case mode == "":
			name = "cluster"
		case strings.Contains(mode, "--tools"):
			name = "mcp"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"chaos", "--quick", "--json", "--seed", "12", "--dir", dir, "--keep-on-failure"}
			args = append(args, strings.Fields(mode)...)
			// The harness runs in the test process (so -race watches it);
			// its child processes are the binary built above.
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			var out, errb lockedBuffer
			start := time.Now()
			code := run(ctx, append(args, "--exe", bin), &out, &errb)
			t.Logf("jingwei chaos --quick %s: exit %d in %s", name, code, time.Since(start).Round(time.Second))
			if code != exitOK && code != exitFailure {
				t.Fatalf("exit %d\nstderr:\n%s", code, errb.String())
			}
			var rep chaosReport
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("stdout is not the JSON report: %v\n%s\nstderr:\n%s", err, out.String(), errb.String())
			}
			var raw struct {
				Rows []struct {
					Invariant string   `json:"invariant"`
					Value     *float64 `json:"value"`
					Target    string   `json:"target"`
					Met       bool     `json:"met"`
					Must      bool     `json:"must"`
					Examples  []string `json:"examples"`
				} `json:"rows"`
			}
			_ = json.Unmarshal([]byte(out.String()), &raw)
			if rep.Error != "" {
				t.Fatalf("the run did not complete: %s\nstderr:\n%s", rep.Error, errb.String())
			}
			if rep.Seed != 12 {
				t.Errorf("seed %d, want 12", rep.Seed)
			}
			want := []string{"duplicate orders", "double charges", "plans used twice", "re-published requests run twice",
				"acknowledged requests lost", "calls left open and unassessed", "closed calls never assessed", "assessments repeated",
				"wrong assessments", "needs_review missing from status", "stuck actions", "reviews contradicting the ledger",
				"charges that got past the ledger's fence", "side effects after their call was fenced", "concurrent prepares not answered with the plan",
				"crash -> first assessment p50", "crash -> first assessment p90", "crash -> first assessment p99", "crash -> first assessment max"}
			if name == "cluster" { // the latency split's rows: the cluster bound is gated on the node-down samples
				want = append(want, "crash -> first assessment p99, node down (leaders up)", "crash -> first assessment p99 beyond leaderless time")
			}
			if len(raw.Rows) != len(want) {
				t.Fatalf("%d rows, want %d: %+v", len(raw.Rows), len(want), raw.Rows)
			}
			failedMust := false
			for i, r := range raw.Rows {
				if r.Invariant != want[i] || r.Target == "" {
					t.Errorf("row %d: %+v, want %q with a target", i, r, want[i])
				}
				v := "-"
				if r.Value != nil {
					v = jsonNumber(*r.Value)
				}
				t.Logf("%-48s %8s  %-16s met %v  %v", r.Invariant, v, r.Target, r.Met, r.Examples)
				if r.Must && !r.Met {
					failedMust = true
				}
			}
			if failedMust != (code == exitFailure) {
				t.Errorf("exit %d, but a must-hold row failed: %v", code, failedMust)
			}
			if failedMust {
				t.Errorf("a must-hold invariant failed (rows above; notes %q)", rep.Notes)
				for _, r := range raw.Rows {
					if r.Must && !r.Met {
						dumpLogs(t, rep.Dir, r.Examples)
					}
				}
			} else if rep.Dir != "" {
				t.Errorf("a run that passed kept its directory %s", rep.Dir)
			}
			ex := rep.Ex
			// Reviews: a person's, or (the harness's recovery worker runs
			// a prober) a probe's.
			reviews := ex.Undecided
			for _, n := range ex.Reviews {
				reviews += n
			}
			for _, n := range ex.ByProbes {
				reviews += n
			}
			t.Logf("exercised: %+v", ex)
			if ex.WorkerKills == 0 || ex.RecovererKills == 0 || ex.LeftOpen == 0 || ex.PlansRun == 0 || reviews == 0 || ex.Calls < 200 || rep.Latency.Samples == 0 {
				t.Errorf("the run did not exercise its faults: %+v, %d latency samples", ex, rep.Latency.Samples)
			}
			if mode == "" && (ex.NodeKills == 0 || ex.Partitions == 0) {
				t.Errorf("the cluster run killed %d nodes and made %d partitions, want both", ex.NodeKills, ex.Partitions)
			}
			// Nothing left behind: the run directory is gone.
			if left, _ := filepath.Glob(filepath.Join(dir, "jingwei-chaos-*")); len(left) != 0 {
				t.Errorf("run directory left behind: %v", left)
			}
		})
	}
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// dumpLogs logs, for a failed invariant, the lines of the kept run's child
// logs that name the session of its first examples (at most 120, each file's in its order): the
// evidence a failure in CI leaves, where the run directory is gone with
// the machine.
func dumpLogs(t *testing.T, dir string, examples []string) {
	t.Helper()
	if dir == "" {
		t.Log("the run directory was not kept: no logs to show")
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for i, ex := range examples {
		if i == 2 {
			break
		}
		session, _, _ := strings.Cut(ex, "/")
		// The session's own lines, and its partition's (taken, lost,
		// dropped: where a session without lines of its own stood).
		part := fmt.Sprintf(`"partition":%d,`, stream.Partition(session, stream.DefaultPartitions))
		var lines []string
		for _, f := range logs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, `"`+session+`"`) || strings.Contains(l, part) && !strings.Contains(l, `"session":`) {
					lines = append(lines, filepath.Base(f)+": "+l)
				}
			}
		}
		if len(lines) > 120 {
			lines = lines[len(lines)-120:]
		}
		t.Logf("log lines naming %s (%d shown):\n%s", session, len(lines), strings.Join(lines, "\n"))
	}
}
