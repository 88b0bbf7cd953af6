package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jingwei/jingwei/effect"
	"github.com/jingwei/jingwei/internal/tracing"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
	"github.com/jingwei/jingwei/worker"
)

// Issue 28's target for tracing with no OTEL_* set: runtime calls at
// least 0.98 of the same calls in a build without the tracing hooks.
var tracingOffTarget = Target{Check: RatioAtLeast, Limit: 0.98}

// ModulePath is the module `jingwei bench` builds its comparison binaries
// from.
const ModulePath = "github.com/jingwei/jingwei"

// tracingOffStep compares runtime calls made by two child processes built
// from the same source with the same flags: `jingwei bench-calls` of the
// ordinary build (its tracing hooks in, no OTEL_* in its environment, so
// tracing off) against the same command of a build with -tags
// jw_notracing (tracing.HooksCompiled false: every hook's check is the
// constant false and the compiler drops the hook). Both children stay up,
// warmed up, and take turns in batches (see tracingOff).
func tracingOffStep(cfg Config) step {
	calls := cfg.n(6000, 1500, 20)
	name := "runtime call, no-op tool, no OTEL_* set vs a build without the tracing hooks (sync=interval)"
	return ratioStep("tracing", name, natsnode.SyncInterval, "calls/s", tracingOffTarget,
		func(ctx context.Context, e *env) (jw, raw []float64, err error) { return e.tracingOff(ctx, calls) })
}

// offBatch is how many calls a child makes per turn.
const offBatch = 200

// tracingOff runs the two children of tracingOffStep against this
// process's server, each on a session of its own after a warm-up, and
// has them take turns of offBatch calls — which goes first alternating —
// so load that comes and goes on the machine falls on both alike. A
// round is calls of each; its figure is calls over the time they took.
func (e *env) tracingOff(ctx context.Context, calls int) (hooks, none []float64, err error) {
	withHooks, without, err := buildTracingPair(ctx, e.dir)
	if err != nil {
		return nil, nil, err
	}
	topo, err := e.topology(ctx, e.prefix("to"))
	if err != nil {
		return nil, nil, err
	}
	defer e.drop(topo)
	var kids [2]*callsChild
	for i, exe := range []string{withHooks, without} {
		if kids[i], err = startCallsChild(ctx, exe, e.srv.ClientURL(), topo.Prefix); err != nil {
			return nil, nil, err
		}
		defer kids[i].stop()
		if _, err := kids[i].turn(calls / 5); err != nil { // warm-up
			return nil, nil, err
		}
	}
	for range e.cfg.Rounds {
		var took [2]time.Duration
		for k := 0; k*offBatch < calls; k++ {
			n := min(offBatch, calls-k*offBatch)
			for j := range 2 {
				i := (k + j) % 2
				d, err := kids[i].turn(n)
				if err != nil {
					return nil, nil, err
				}
				took[i] += d
			}
		}
		hooks, none = append(hooks, rate(calls, took[0])), append(none, rate(calls, took[1]))
	}
	return hooks, none, nil
}

// buildTracingPair builds cmd/jingwei twice into dir, with the same flags
// but for -tags jw_notracing on the second, from the jingwei module the
// go command finds from the working directory. It fails when there is no
// go command or no jingwei module there: the comparison needs both
// builds from one source.
func buildTracingPair(ctx context.Context, dir string) (withHooks, without string, err error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("%w: the comparison builds jingwei with and without its tracing hooks and needs the go command: %v", ErrNoExecutable, err)
	}
	mod := strings.TrimSpace(string(gomod))
	if b, rerr := os.ReadFile(mod); mod == "" || mod == os.DevNull || rerr != nil || !bytes.HasPrefix(b, []byte("module "+ModulePath+"\n")) {
		return "", "", fmt.Errorf("%w: the comparison builds jingwei with and without its tracing hooks from source: run it inside the %s module (go.mod here: %q)", ErrNoExecutable, ModulePath, mod)
	}
	root := filepath.Dir(mod)
	build := func(out string, tags ...string) error {
		args := append([]string{"build", "-o", out}, tags...)
		cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/jingwei")...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("bench: go %s: %v: %s", strings.Join(cmd.Args[1:], " "), err, b)
		}
		return nil
	}
	withHooks, without = filepath.Join(dir, "jingwei-hooks"), filepath.Join(dir, "jingwei-nohooks")
	if err := build(withHooks); err != nil {
		return "", "", err
	}
	return withHooks, without, build(without, "-tags", "jw_notracing")
}

// callsChild is a running `jingwei bench-calls --serve`: it makes as
// many calls as each line on its stdin says and answers each with the
// nanoseconds they took.
type callsChild struct {
	exe    string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// startCallsChild starts exe bench-calls --serve with no OTEL_* variable
// in its environment, and checks what it says of itself: tracing off,
// and hooks compiled unless it is the -nohooks build.
func startCallsChild(ctx context.Context, exe, server, prefix string) (*callsChild, error) {
	c := &callsChild{exe: filepath.Base(exe)}
	c.cmd = exec.CommandContext(ctx, exe, "bench-calls", "--serve", "--server", server, "--prefix", prefix, "--session", "c-"+c.exe)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			c.cmd.Env = append(c.cmd.Env, kv)
		}
	}
	c.cmd.Stderr = &c.stderr
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewScanner(out)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", c.exe, err)
	}
	var r CallsReport
	if !c.out.Scan() || json.Unmarshal(c.out.Bytes(), &r) != nil {
		c.stop()
		return nil, fmt.Errorf("%w: %s: %s", ErrChildExited, c.exe, c.stderr.Bytes())
	}
	if r.Hooks == strings.HasSuffix(exe, "-nohooks") || r.Tracing {
		c.stop()
		return nil, fmt.Errorf("bench: %s reports tracing hooks compiled %t, tracing on %t", c.exe, r.Hooks, r.Tracing)
	}
	return c, nil
}

// turn has the child make n calls and returns the time they took.
func (c *callsChild) turn(n int) (time.Duration, error) {
	if _, err := fmt.Fprintln(c.in, n); err != nil {
		return 0, fmt.Errorf("%w: %s: %v: %s", ErrChildExited, c.exe, err, c.stderr.Bytes())
	}
	if !c.out.Scan() {
		return 0, fmt.Errorf("%w: %s: %s", ErrChildExited, c.exe, c.stderr.Bytes())
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(c.out.Text()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: %s answered %q: %s", c.exe, c.out.Text(), c.stderr.Bytes())
	}
	return time.Duration(ns), nil
}

// stop closes the child's stdin (it exits) and waits for it.
func (c *callsChild) stop() {
	_ = c.in.Close()
	_ = c.cmd.Wait()
}

// CallsConfig is what ServeCalls does.
type CallsConfig struct {
	// Server is the NATS URL; Prefix the topology's prefix (it exists).
	Server, Prefix string
	// Session is the session log of the calls.
	Session string
}

// CallsReport is the first line `jingwei bench-calls --serve` prints.
type CallsReport struct {
	// Hooks reports whether the binary has the tracing hooks
	// (tracing.HooksCompiled); Tracing whether tracing is on.
	Hooks   bool `json:"tracing_hooks"`
	Tracing bool `json:"tracing"`
}

// ServeCalls is the child process of the tracing-off row (`jingwei
// bench-calls --serve`): it connects to c.Server, prints a CallsReport
// line, then for each line of in holding a count makes that many
// runtime calls of a no-op tool, one at a time, in c.Session, and prints
// the nanoseconds they took. It returns at the end of in.
func ServeCalls(ctx context.Context, c CallsConfig, in io.Reader, out io.Writer) error {
	if c.Server == "" || c.Prefix == "" || c.Session == "" {
		return fmt.Errorf("%w: server, prefix and session are required", ErrInvalidConfig)
	}
	nc, err := nats.Connect(c.Server, nats.Name("jingwei-bench-calls"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	topo, err := stream.OpenTopology(ctx, js, stream.TopologyConfig{Prefix: c.Prefix})
	if err != nil {
		return err
	}
	reg, err := worker.NewRegistry(worker.Tool{
		Metadata: effect.Metadata{Name: "noop"}.WithEffect(effect.ReadOnly, "noop-v1"),
		Body:     func(context.Context, worker.BodyRequest) (json.RawMessage, error) { return nil, nil },
	})
	if err != nil {
		return err
	}
	plans, budget := stream.NewPlans(topo.PlanBucket), stream.NewBudget(topo.Budget)
	// A session holds at most 100,000 events and 16 MiB: the calls move
	// to a fresh session (untimed) every sessionCalls.
	const sessionCalls = 20_000
	var rt *worker.Runtime
	var gen, inSession int
	next := func() error {
		gen, inSession = gen+1, 0
		lg, err := topo.Logs().OpenLog(ctx, fmt.Sprintf("%s-%d", c.Session, gen), "bench", 1)
		if err != nil {
			return err
		}
		rt, err = worker.New(worker.Config{Session: lg.Session(), Log: lg, Registry: reg, Plans: plans, Budget: budget})
		return err
	}
	b, _ := json.Marshal(CallsReport{Hooks: tracing.HooksCompiled, Tracing: tracing.Enabled()})
	if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
		return err
	}
	args := json.RawMessage(`{"sku":"A-1","qty":1}`)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: want a count of calls, got %q", ErrInvalidConfig, sc.Text())
		}
		if rt == nil || inSession+n > sessionCalls {
			if err := next(); err != nil {
				return err
			}
		}
		inSession += n
		start := time.Now()
		for range n {
			res, err := rt.Call(ctx, "noop", args)
			if err != nil {
				return err
			}
			if res.Status != schema.StatusOK {
				return fmt.Errorf("runtime call: status %q: %s", res.Status, res.Error)
			}
		}
		if _, err := fmt.Fprintln(out, time.Since(start).Nanoseconds()); err != nil {
			return err
		}
	}
	return sc.Err()
}
