package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker/recoverer"
)

// memoryTarget is the ceiling of the recovery worker's resident memory,
// in MiB, while it watches the open calls of the scenario.
var memoryTarget = Target{Check: ValueBelow, Limit: 150, Text: "< 150 MiB"}

// memoryOpen is how many calls stay open (under live leases) in the memory
// scenario.
const memoryOpen = 8

func memoryStep(cfg Config) step {
	events := cfg.MemoryEvents
	what := fmt.Sprintf("%d events, %d open calls", events, memoryOpen)
	if cfg.Quick && events < DefaultMemoryEvents {
		what += ", quick: not 1,000,000"
	}
	rss := fmt.Sprintf("recovery worker VmRSS after %s", what)
	hwm := fmt.Sprintf("recovery worker VmHWM (peak) after %s", what)
	return step{
		scenario: "memory", name: "recovery worker memory", server: natsnode.SyncInterval, rows: []row{{rss, memoryTarget}, {hwm, memoryTarget}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			vm, err := e.memory(ctx, events)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewValueResult(rss, vm["VmRSS"]/1024, "MiB", memoryTarget),
				NewValueResult(hwm, vm["VmHWM"]/1024, "MiB", memoryTarget),
			}, nil
		},
	}
}

// memory fills a fresh topology with events of finished calls (sessions of
// 10,000 events) plus memoryOpen calls left open in sessions whose leases
// this process holds (live for the whole scenario, so the recovery worker
// neither takes them over nor forgets them), runs `jingwei recover` as a
// child process, waits until its events consumer has acknowledged the last
// event and returns the child's /proc/<pid>/status memory figures in KiB.
func (e *env) memory(ctx context.Context, events int) (map[string]float64, error) {
	if e.cfg.Exe == "" {
		return nil, ErrNoExecutable
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return nil, fmt.Errorf("bench: the memory scenario reads /proc/<pid>/status (Linux only): %w", err)
	}
	topo, err := e.topology(ctx, e.prefix("mem"), func(tc *stream.TopologyConfig) { tc.LeaseTTL = time.Hour })
	if err != nil {
		return nil, err
	}
	defer e.drop(topo)
	sessions := max(events/10_000, memoryOpen)
	for i := range memoryOpen {
		if _, err := topo.Leases().AcquireLease(ctx, fmt.Sprintf("s-%d", i), "bench-writer"); err != nil {
			return nil, err
		}
	}
	f, err := fill(ctx, e.nc, topo, fillSpec{name: "s", sessions: sessions, events: events, open: memoryOpen})
	if err != nil {
		return nil, err
	}
	keyFile, err := e.plannerKeyFile()
	if err != nil {
		return nil, err
	}
	rec, err := startChild(e.cfg.Exe, e.dir, "recover", "recover",
		"--server", e.srv.ClientURL(), "--prefix", topo.Prefix, "--lease-ttl", time.Hour.String(), "--planner-key", keyFile, "--log-format", "json", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	defer rec.Stop(10 * time.Second)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	name := topo.Prefix + "-recoverer-" + recoverer.DefaultName + "-events"
	if _, err := ackFloor(wctx, e.js, topo.Names().StreamName("EVENTS"), name, f.lastSeq, 50*time.Millisecond, rec.exitedErr); err != nil {
		return nil, fmt.Errorf("waiting for jingwei recover to consume %d events: %w", f.events, err)
	}
	vm, err := procStatus(rec.PID())
	if err != nil {
		return nil, err
	}
	if vm["VmRSS"] == 0 || vm["VmHWM"] == 0 {
		return nil, fmt.Errorf("bench: /proc/%d/status has no VmRSS/VmHWM", rec.PID())
	}
	return vm, nil
}

// procStatus reads the Vm* lines of /proc/<pid>/status, in KiB.
func procStatus(pid int) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseStatus(f)
}

// parseStatus parses /proc/<pid>/status lines such as "VmRSS:   12345 kB".
func parseStatus(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Vm") {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		n, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: /proc status %s: %w", k, err)
		}
		out[k] = n
	}
	return out, sc.Err()
}
