package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/stream"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// Config configures Run. The zero value runs every scenario at full size
// except the parts that need the jingwei binary (crash, memory, the scale
// scenario's fleet run), which fail without Exe.
type Config struct {
	// Quick runs a smoke-sized benchmark that finishes in well under a
	// minute: fewer rounds, fewer events, the interval durability mode only,
	// 100,000 events instead of 1,000,000 for the memory scenario. The
	// scenario names say so. Defaults to false.
	Quick bool
	// Rounds is how many rounds the timed scenarios run; figures are
	// medians over them. Classification runs at most 5 (each round fills
	// a fresh topology), Inspect at least 5 (it is cheap), the crash
	// scenario Rounds-2 but at least 2. Defaults to 7 (3 with Quick).
	Rounds int
	// Only, when not empty, runs just the scenarios named (see Scenarios:
	// "appends", "runtime", "pipeline", "mcp", "classify", "inspect", "issue",
	// "crash", "memory", "scale"). Defaults to all.
	Only []string
	// Dir is where the embedded servers keep their stores (a fresh
	// subdirectory, removed afterwards). Defaults to os.TempDir().
	Dir string
	// Exe is the jingwei binary the crash and memory scenarios run as child
	// processes (`jingwei worker`, `jingwei recover`). Empty: those two
	// scenarios fail with ErrNoExecutable.
	Exe string
	// LeaseTTL is the lease TTL of the crash scenario (worker and recovery
	// worker). Defaults to 2 s; at least 1 s.
	LeaseTTL time.Duration
	// Scale multiplies the event and call counts of the scenarios (not the
	// memory scenario's, see MemoryEvents; the 100,000-event Inspect history
	// only shrinks, for Scale below 1). Tests use a small one. Defaults to 1.
	Scale float64
	// MemoryEvents overrides the memory scenario's event count. Defaults to
	// 1,000,000 (100,000 with Quick).
	MemoryEvents int
	// Progress, when set, is told when a step starts and ends (a progress
	// bar). Nil: silent.
	Progress Progress
	// Logger receives what the harness does (not the results). Defaults to
	// zerolog.Nop().
	Logger zerolog.Logger
}

// Defaults of Config.
const (
	DefaultRounds       = 7
	DefaultQuickRounds  = 3
	DefaultLeaseTTL     = 2 * time.Second
	DefaultMemoryEvents = 1_000_000
	QuickMemoryEvents   = 100_000
)

// Scenarios are the scenario names Config.Only accepts, in the order they
// run.
var Scenarios = []string{"appends", "runtime", "tracing", "pipeline", "mcp", "classify", "inspect", "issue", "crash", "memory", "scale"}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Rounds <= 0 {
		c.Rounds = DefaultRounds
		if c.Quick {
			c.Rounds = DefaultQuickRounds
		}
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Scale <= 0 {
		c.Scale = 1
	}
	if c.MemoryEvents <= 0 {
		c.MemoryEvents = DefaultMemoryEvents
		if c.Quick {
			c.MemoryEvents = QuickMemoryEvents
		}
	}
	if c.Progress == nil {
		c.Progress = nopProgress{}
	}
	return c
}

func (c Config) validate() error {
	for _, s := range c.Only {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("%w: unknown scenario %q (want one of %s)", ErrInvalidConfig, s, strings.Join(Scenarios, ", "))
		}
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("%w: LeaseTTL %s: at least 1s", ErrInvalidConfig, c.LeaseTTL)
	}
	return nil
}

func (c Config) runs(name string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, name) }

// n scales a count, never below min.
func (c Config) n(full, quick, least int) int {
	v := full
	if c.Quick {
		v = quick
	}
	return max(int(float64(v)*c.Scale), least)
}

// env is one embedded server and a connection to it.
type env struct {
	cfg  Config
	mode natsnode.SyncMode
	srv  *natsnode.Embedded
	nc   *nats.Conn
	js   jetstream.JetStream
	log  zerolog.Logger
	seq  int
	// dir holds the child processes' logs.
	dir string
	// planner signs the plans of the recovery workers the scenarios run.
	planner nkeys.KeyPair
}

// plannerKeyFile writes the planner seed into the bench directory (once)
// for `jingwei recover` children and returns the file.
func (e *env) plannerKeyFile() (string, error) {
	f := filepath.Join(e.dir, "planner.nk")
	if _, err := os.Stat(f); err == nil {
		return f, nil
	}
	seed, err := e.planner.Seed()
	if err != nil {
		return "", err
	}
	return f, os.WriteFile(f, append(seed, '\n'), 0o600)
}

// prefix returns a fresh topology prefix, so scenarios and rounds never
// share streams (assessment Msg-Ids would otherwise be deduplicated across
// rounds, which is cheaper than the real thing).
func (e *env) prefix(kind string) string {
	e.seq++
	return fmt.Sprintf("b%s%d", kind, e.seq)
}

// topology ensures a fresh topology with the given prefix.
func (e *env) topology(ctx context.Context, prefix string, mod ...func(*stream.TopologyConfig)) (*stream.Topology, error) {
	tc := stream.TopologyConfig{Prefix: prefix}
	for _, m := range mod {
		m(&tc)
	}
	return stream.EnsureTopology(ctx, e.js, tc)
}

// drop deletes a topology's streams and buckets (best effort): the store
// stays small and later scenarios do not pay for earlier ones.
func (e *env) drop(t *stream.Topology) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = t.Drop(ctx)
}

func startEnv(ctx context.Context, cfg Config, dir string, mode natsnode.SyncMode) (*env, error) {
	srv, err := natsnode.StartEmbedded(ctx, natsnode.EmbeddedConfig{Dir: dir, Listen: "127.0.0.1:-1", Sync: mode, Name: "jingwei-bench-" + string(mode), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	// Scenarios delete their streams when done; a server whose last stream
	// is deleted removes the account's store directory, and a stream created
	// at that moment fails ("could not create storage directory"). One
	// stream that stays keeps the directory.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_KEEP", Subjects: []string{"bench.keep"}, Storage: jetstream.FileStorage}); err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	planner, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, mode: mode, srv: srv, nc: nc, js: js, dir: dir, planner: planner, log: cfg.Logger.With().Str("sync", string(mode)).Logger()}, nil
}

func (e *env) close() {
	e.nc.Close()
	e.srv.Shutdown()
}

// step is one scenario on one server; it returns its rows.
type step struct {
	scenario string // one of Scenarios
	name     string // shown in the progress bar
	server   natsnode.SyncMode
	// rows are the step's rows and targets, for the rows of a failed step.
	rows []row
	run  func(ctx context.Context, e *env) ([]Result, error)
}

// ratioStep returns a step of one row, name: the medians of the jingwei and
// raw rounds that measure returns, in unit, checked against target.
func ratioStep(scenario, name string, mode natsnode.SyncMode, unit string, target Target,
	measure func(ctx context.Context, e *env) (jw, raw []float64, err error)) step {
	return step{
		scenario: scenario, name: name, server: mode, rows: []row{{name, target}},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			jw, raw, err := measure(ctx, e)
			if err != nil {
				return nil, err
			}
			return []Result{NewResult(name, Median(jw), Median(raw), unit, target)}, nil
		},
	}
}

// twoRatioStep is ratioStep for a measure with two raw baselines run in
// the same rounds: row a is the medians of the jingwei and rawA rounds,
// row b of the jingwei and rawB rounds, in unit, each checked against its
// row's target. name is the step's, shown in the progress bar.
func twoRatioStep(scenario, name string, mode natsnode.SyncMode, unit string, a, b row,
	measure func(ctx context.Context, e *env) (jw, rawA, rawB []float64, err error)) step {
	return step{
		scenario: scenario, name: name, server: mode, rows: []row{a, b},
		run: func(ctx context.Context, e *env) ([]Result, error) {
			jw, rawA, rawB, err := measure(ctx, e)
			if err != nil {
				return nil, err
			}
			return []Result{
				NewResult(a.name, Median(jw), Median(rawA), unit, a.target),
				NewResult(b.name, Median(jw), Median(rawB), unit, b.target),
			}, nil
		},
	}
}

// row names a row and its target.
type row struct {
	name   string
	target Target
}

// plan lists the steps cfg asks for.
func plan(cfg Config) []step {
	var steps []step
	if cfg.runs("appends") {
		steps = append(steps, appendSteps(cfg, natsnode.SyncInterval)...)
	}
	if cfg.runs("runtime") {
		steps = append(steps, runtimeStep(cfg, natsnode.SyncInterval))
	}
	if cfg.runs("tracing") {
		steps = append(steps, tracingStep(cfg), tracingOffStep(cfg))
	}
	if cfg.runs("pipeline") {
		steps = append(steps, pipelineStep(cfg, natsnode.SyncInterval))
	}
	if cfg.runs("mcp") {
		steps = append(steps, mcpStep(cfg))
	}
	if cfg.runs("classify") {
		steps = append(steps, classifyStep(cfg))
	}
	if cfg.runs("inspect") {
		steps = append(steps, inspectStep(cfg))
	}
	if cfg.runs("issue") {
		steps = append(steps, issueStep(cfg))
	}
	if cfg.runs("crash") {
		steps = append(steps, crashStep(cfg))
	}
	if cfg.runs("memory") {
		steps = append(steps, memoryStep(cfg))
	}
	if cfg.runs("scale") {
		steps = append(steps, scaleSteps(cfg)...)
	}
	// The durable mode last, on a server of its own (full runs only).
	if !cfg.Quick {
		if cfg.runs("appends") {
			steps = append(steps, appendSteps(cfg, natsnode.SyncAlways)...)
		}
		if cfg.runs("runtime") {
			steps = append(steps, runtimeStep(cfg, natsnode.SyncAlways))
		}
		if cfg.runs("pipeline") {
			steps = append(steps, pipelineStep(cfg, natsnode.SyncAlways))
		}
	}
	return steps
}

// Run runs the scenarios cfg asks for and returns their rows, in order. A
// scenario that fails yields rows with Error set (and Met false) and makes
// Run return an error matching ErrScenarioFailed, after every other
// scenario has run. A missed target is not an error. Run returns early
// with ctx's error when ctx ends.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "jingwei-bench-*")
	if err != nil {
		return nil, fmt.Errorf("bench: store directory: %w", err)
	}
	defer os.RemoveAll(dir)

	steps := plan(cfg)
	cfg.Progress.Start(len(steps))
	defer cfg.Progress.Done()
	var (
		out  []Result
		errs []error
		envs = map[natsnode.SyncMode]*env{}
	)
	defer func() {
		for _, e := range envs {
			e.close()
		}
	}()
	for i, s := range steps {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		cfg.Progress.Step(i, s.name)
		// One server per durability mode; the interval server is shut down
		// before the always server starts, so they never compete.
		e := envs[s.server]
		if e == nil {
			for m, old := range envs {
				old.close()
				delete(envs, m)
			}
			e, err = startEnv(ctx, cfg, dir+"/"+string(s.server), s.server)
			if err != nil {
				return out, fmt.Errorf("bench: start embedded server (sync=%s): %w", s.server, err)
			}
			envs[s.server] = e
		}
		start := time.Now()
		rows, err := s.run(ctx, e)
		cfg.Logger.Info().Str("step", s.name).Dur("took", time.Since(start)).Err(err).Msg("step done")
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			for _, r := range s.rows {
				out = append(out, failed(r.name, r.target, err))
			}
			continue
		}
		out = append(out, rows...)
	}
	cfg.Progress.Step(len(steps), "done")
	if len(errs) > 0 {
		return out, fmt.Errorf("%w: %w", ErrScenarioFailed, errors.Join(errs...))
	}
	return out, nil
}

// alternate runs rounds of jw and raw, jw first in even rounds and raw
// first in odd ones, and returns what each measured per round.
func alternate(ctx context.Context, rounds int, jw, raw func(ctx context.Context, round int) (float64, error)) (jws, raws []float64, err error) {
	for i := range rounds {
		first, second := jw, raw
		if i%2 == 1 {
			first, second = raw, jw
		}
		a, err := first(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		b, err := second(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		if i%2 == 1 {
			a, b = b, a
		}
		jws, raws = append(jws, a), append(raws, b)
	}
	return jws, raws, nil
}

// waitFor polls cond every interval until it returns true, an error, or
// ctx ends.
func waitFor(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// rate is count per second of d.
func rate(count int, d time.Duration) float64 { return float64(count) / d.Seconds() }
