package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/proc"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/access"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// The steps the progress bar shows.
var steps = []string{"start the deployment", "set up the topology", "start the workers", "workload and faults", "settle", "host and reviewer", "check the invariants"}

const (
	stepStart = iota
	stepSetup
	stepWorkers
	stepWorkload
	stepSettle
	stepHost
	stepCheck
)

// harness is one run.
type harness struct {
	cfg   Config
	log   zerolog.Logger
	runID string
	dir   string
	logs  string

	keys      access.KeyDir
	trustFile string
	reviewer  nkeys.KeyPair

	net     *network
	url     string
	sup     *supervisor
	nodes   []*slot
	workers []*slot
	recov   *slot
	cl      *clients
	live    *live
	wl      *workload
	faults  *faultLog
	t0      time.Time
	started time.Time

	progress Progress
	step     int

	pub pubStats

	mu            sync.Mutex
	acked         []bool
	kills         []kill
	pauseOwners   []string
	prepares      map[string]int
	reviews       map[string]int
	duringPause   int
	concurrent    int
	mismatch      []string
	hostNotes     map[string]string
	notes         []string
	killMu        sync.Mutex   // killWorker
	aiming        atomic.Int32 // outage killers aiming (killsWhileOut): the random killer waits
	setupAttempts int
	checkpoint    *checkpoint
	final         *snapshot

	// leaders watches, on a cluster, the JetStream leaders the takeover
	// needs; windows and outages are computed from it for the report.
	leaders *leaderMonitor
	windows []leaderWindow
	outages map[int][]interval
}

// Run runs the chaos test cfg describes, end to end, and returns its
// report. The error is non-nil when the run could not be completed (the
// deployment did not come up, a stream could not be read back); the
// report then holds what was measured and Error says why. A run that
// completed returns a nil error whatever its invariants say: Report.Err
// tells whether every must-hold row was met.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, log: cfg.Logger, progress: cfg.Progress, started: time.Now(),
		prepares: map[string]int{}, reviews: map[string]int{}, hostNotes: map[string]string{}}
	if h.progress == nil {
		h.progress = nopProgress{}
	}
	h.progress.Start(len(steps))
	err := h.run(ctx)
	h.shutdown()
	h.progress.Done()
	rep := h.report()
	if err != nil {
		rep.Error = err.Error()
	}
	h.removeDir(rep)
	return rep, err
}

type nopProgress struct{}

func (nopProgress) Start(int)        {}
func (nopProgress) Step(int, string) {}
func (nopProgress) Done()            {}

func (h *harness) stepTo(i int, name string) {
	h.step = i
	h.progress.Step(i, name)
	h.log.Info().Str("step", name).Msg("chaos")
}

func (h *harness) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, fmt.Sprintf(format, args...))
}

// rng returns a random source for one purpose, derived from the seed, so
// that each purpose draws the same numbers whatever the others do.
func (h *harness) rng(purpose uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(h.cfg.Seed), purpose))
}

func (h *harness) run(ctx context.Context) error {
	cfg := h.cfg
	h.stepTo(stepStart, steps[stepStart])
	h.runID = fmt.Sprintf("cx%06x", h.rng(1).Uint32()&0xffffff)
	if cfg.Mode == ModeExternal { // a deployment that keeps the sessions of earlier runs
		h.runID += strconv.FormatInt(time.Now().Unix()%100000, 36)
	}
	dir, err := os.MkdirTemp(cfg.Dir, "jingwei-chaos-")
	if err != nil {
		return err
	}
	h.dir, h.logs = dir, filepath.Join(dir, "logs")
	if err := os.MkdirAll(h.logs, 0o755); err != nil {
		return err
	}
	h.sup = newSupervisor(cfg.Exe, h.logs, h.log)
	if err := h.credentials(); err != nil {
		return err
	}
	if err := h.startNodes(ctx); err != nil {
		return err
	}

	h.stepTo(stepSetup, steps[stepSetup])
	if err := h.setup(ctx); err != nil {
		return err
	}
	if cfg.Mode == ModeCluster {
		if h.leaders, err = startLeaderMonitor(h.net, h.keys); err != nil {
			return err
		}
	}
	if h.cl, err = connectRoles(ctx, h.url, h.roleConn, h.reviewer, 30*time.Second); err != nil {
		return err
	}
	h.live = newLive(h.log)
	if err := h.live.start(ctx, h.cl.adminJS, h.runID); err != nil {
		return err
	}

	h.stepTo(stepWorkers, steps[stepWorkers])
	if err := h.startWorkers(ctx); err != nil {
		return err
	}

	h.stepTo(stepWorkload, steps[stepWorkload])
	h.workload(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	h.stepTo(stepSettle, steps[stepSettle])
	h.restoreAll(ctx)
	h.settle(ctx, "after the faults")
	cp := &checkpoint{}
	if cp.Snap, err = readSnapshot(ctx, h.cl.adminJS, h.runID, h.runID); err != nil {
		return err
	}
	if cp.Awaiting, err = h.cl.statusAwaiting(ctx); err != nil {
		cp.Err = err.Error()
	}
	h.checkpoint = cp

	h.stepTo(stepHost, steps[stepHost])
	if err := h.hostPhase(ctx); err != nil {
		return err
	}
	h.settle(ctx, "after the host phase")

	h.stepTo(stepCheck, steps[stepCheck])
	if h.final, err = readSnapshot(ctx, h.cl.adminJS, h.runID, h.runID); err != nil {
		return err
	}
	return nil
}

// credentials sets up the role keys (a fresh directory, or the external
// deployment's) and the reviewer's key with the file that trusts it.
func (h *harness) credentials() error {
	cfg := h.cfg
	if cfg.Mode == ModeExternal {
		h.keys = access.KeyDir(cfg.AuthDir)
	} else {
		h.keys = access.KeyDir(filepath.Join(h.dir, "auth"))
		if _, err := h.keys.Init(); err != nil {
			return err
		}
	}
	var err error
	if cfg.ReviewerKey != "" {
		if h.reviewer, err = access.ReadSeedFile(cfg.ReviewerKey); err != nil {
			return fmt.Errorf("%w: ReviewerKey: %v", ErrInvalidConfig, err)
		}
	} else if h.reviewer, err = nkeys.CreateUser(); err != nil {
		return err
	}
	pub, err := h.reviewer.PublicKey()
	if err != nil {
		return err
	}
	h.trustFile = filepath.Join(h.dir, "trusted-reviewers")
	if err := os.WriteFile(h.trustFile, []byte("# the chaos run's reviewer\n"+pub+"\n"), 0o644); err != nil {
		return err
	}
	if cfg.Mode == ModeExternal && cfg.ReviewerKey == "" {
		h.note("reviews are signed with a fresh key (%s) that only the harness's own recovery worker trusts: the deployment's recovery workers refuse them unless they trust it too (--reviewer-key)", pub)
	}
	return nil
}

// startNodes starts the NATS nodes (and the proxies between them), or
// takes the external deployment's URL.
func (h *harness) startNodes(ctx context.Context) error {
	cfg := h.cfg
	if cfg.Mode == ModeExternal {
		h.url = cfg.Server
		return h.checkCredentials(ctx)
	}
	var err error
	if h.net, err = newNetwork(cfg.Nodes); err != nil {
		return err
	}
	h.url = h.net.URLs()
	for i := range cfg.Nodes {
		nc := h.net.nodeConfig(i, filepath.Join(h.dir, fmt.Sprintf("node-%d", i)), string(h.keys))
		nc.Sync = natsnode.SyncMode(cfg.Sync)
		args := append(nc.Args(), "--log-format", "json")
		sl, err := h.sup.add(fmt.Sprintf("node-%d", i), "node", profile{}, func(int, profile) ([]string, string) { return args, nc.Name })
		if err != nil {
			return err
		}
		h.nodes = append(h.nodes, sl)
	}
	for i, sl := range h.nodes {
		if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", h.net.client[i]), cfg.StartTimeout); err != nil {
			return fmt.Errorf("%w; %s's log ends with:\n%s", err, sl.name, h.sup.tail(sl))
		}
	}
	return nil
}

// setup runs `jingwei setup` as admin until it succeeds: a cluster has no
// JetStream meta leader for its first seconds, and setup exits at once
// when JetStream does not answer.
func (h *harness) setup(ctx context.Context) error {
	cfg := h.cfg
	deadline := time.Now().Add(cfg.StartTimeout)
	for attempt := 1; ; attempt++ {
		h.setupAttempts = attempt
		c, err := proc.Start(proc.Config{Name: "setup", Exe: cfg.Exe, LogPath: filepath.Join(h.logs, fmt.Sprintf("setup-%d.log", attempt)),
			Args: append(append([]string{"setup", "--server", h.url}, h.roleArgs(access.RoleAdmin)...), "--replicas", strconv.Itoa(cfg.Replicas),
				"--lease-ttl", cfg.LeaseTTL.String(), "--log-format", "json")})
		if err != nil {
			return err
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			c.Kill()
			return ctx.Err()
		}
		if c.Err() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: jingwei setup failed %d times; the last ended with:\n%s", ErrNotReady, attempt, c.LogTail(2000))
		}
		if !sleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// drawProfile draws a tool-worker incarnation's delays.
func (h *harness) drawProfile(rng *rand.Rand) profile {
	slow := fraction(h.cfg.SlowFraction)
	d := func() time.Duration {
		lo := 200 * time.Millisecond
		if h.cfg.ToolDelay <= lo {
			return h.cfg.ToolDelay
		}
		return lo + time.Duration(rng.Int64N(int64(h.cfg.ToolDelay-lo)))
	}
	switch u := rng.Float64(); {
	case u < slow*0.7:
		return profile{After: d()}
	case u < slow:
		return profile{Before: d()}
	}
	return profile{}
}

// startWorkers starts the recovery worker and the tool workers and waits
// until the jingwei service answers.
func (h *harness) startWorkers(ctx context.Context) error {
	cfg := h.cfg
	common := []string{"--server", h.url, "--lease-ttl", cfg.LeaseTTL.String(),
		"--replicas", strconv.Itoa(cfg.Replicas), "--log-format", "json"}
	name := "chaos"
	if cfg.Mode == ModeExternal {
		name = "chaos-" + h.runID
	}
	recArgs := append(append([]string{"recover", "--trust-reviewers", h.trustFile, "--name", name}, common...), h.roleArgs(access.RoleRecoverer)...)
	if h.probes() {
		key, err := h.proberKey()
		if err != nil {
			return err
		}
		recArgs = append(recArgs, "--probe-key", key)
	}
	var err error
	if h.recov, err = h.sup.add("recoverer", "recover", profile{}, func(int, profile) ([]string, string) { return recArgs, "" }); err != nil {
		return err
	}
	maxSessions := cfg.Sessions
	if cfg.Workers > 1 { // sessions spread, and the others can hold them all while one is down
		maxSessions = (cfg.Sessions+cfg.Workers-2)/(cfg.Workers-1) + 1
	}
	prof := h.rng(2)
	if cfg.Tools != "" {
		h.sup.env = []string{"NATS_URL=" + h.url, "JINGWEI_AUTH=" + string(h.keys), "JINGWEI_BIN=" + h.sup.exe}
	}
	for i := range cfg.Workers {
		build := func(inc int, p profile) ([]string, string) {
			owner := fmt.Sprintf("%s-w%d-%d", h.runID, i, inc)
			args := append(append([]string{"worker", "--owner", owner, "--max-sessions", strconv.Itoa(maxSessions)}, common...), h.roleArgs(access.RoleWorker)...)
			if p.Before > 0 {
				args = append(args, "--tool-delay", p.Before.String())
			}
			if p.After > 0 {
				args = append(args, "--tool-delay-after", p.After.String())
			}
			if cfg.Tools != "" {
				args = append(args, "--tools", cfg.Tools)
			}
			return args, owner
		}
		sl, err := h.sup.add(fmt.Sprintf("worker-%d", i), "worker", h.drawProfile(prof), build)
		if err != nil {
			return err
		}
		h.workers = append(h.workers, sl)
	}
	deadline := time.Now().Add(cfg.StartTimeout)
	for {
		var st struct{}
		code, msg := h.cl.request(ctx, "status", map[string]string{}, &st)
		if code == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: jw.api.status: %s %s; the recovery worker's log ends with:\n%s", ErrNotReady, code, msg, h.sup.tail(h.recov))
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// workload publishes the actions and runs the faults for Config.Duration,
// then stops the faults (each finishes: a node comes back, a partition
// heals, a frozen worker resumes) and waits for the publisher.
func (h *harness) workload(ctx context.Context) {
	cfg := h.cfg
	h.wl = newWorkload(h.rng(3), h.runID, cfg.Actions, cfg.Sessions, fraction(cfg.Republish), cfg.Duration)
	h.acked = make([]bool, len(h.wl.actions))
	h.t0 = time.Now()
	h.faults = &faultLog{t0: h.t0}

	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		h.wl.publish(ctx, h.cl.agentJS, h.t0, &h.pub, func(i int) {
			h.mu.Lock()
			h.acked[i] = true
			h.mu.Unlock()
		})
	}()

	fctx, stopFaults := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if !cfg.NoWorkerKills {
		wg.Add(1)
		go func() { defer wg.Done(); h.killWorkers(fctx) }()
	}
	plan := schedule(h.rng(4), cfg)
	var cluster []plannedFault
	for _, pf := range plan {
		switch pf.Kind {
		case "node_kill", "partition":
			cluster = append(cluster, pf)
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				at := pf.At
				if pf.Kind == "pause" {
					at = max(0, at-pauseLead(cfg.LeaseTTL))
				}
				if !sleepCtx(fctx, time.Until(h.t0.Add(at))) {
					return
				}
				if pf.Kind == "recoverer_kill" {
					h.killRecoverer(fctx, pf.For)
				} else {
					h.pause(ctx, fctx, pf)
				}
			}()
		}
	}
	if len(cluster) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); h.clusterFaults(fctx, cluster) }()
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(cfg.Duration)
	defer end.Stop()
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-end.C:
			running = false
		case <-tick.C:
			h.pub.mu.Lock()
			p := h.pub.published
			h.pub.mu.Unlock()
			h.progress.Step(stepWorkload, fmt.Sprintf("workload: %d/%d published, %d faults", p, len(h.wl.pubs), len(h.faults.list())))
		}
	}
	stopFaults()
	wg.Wait()
	select {
	case <-pubDone:
	case <-ctx.Done():
	}
}

// killWorkers SIGKILLs a random live tool worker every KillEvery and
// restarts it at once, with a new profile.
func (h *harness) killWorkers(ctx context.Context) {
	rng, prof := h.rng(5), h.rng(6)
	lo, hi := h.cfg.KillEvery[0], h.cfg.KillEvery[1]
	for {
		wait := lo
		if hi > lo {
			wait += time.Duration(rng.Int64N(int64(hi - lo)))
		}
		if !sleepCtx(ctx, wait) {
			return
		}
		cands := h.sup.live("worker")
		if len(cands) == 0 || h.aiming.Load() > 0 {
			continue
		}
		h.killWorker(ctx, cands[rng.IntN(len(cands))], h.drawProfile(prof), "")
	}
}

// killWorker SIGKILLs one tool-worker incarnation, records the kill and
// starts the next incarnation with profile p.
func (h *harness) killWorker(ctx context.Context, sl *slot, p profile, why string) {
	// The random killer, the outage killer (killsWhileOut) and a pause's
	// restart may pick the same slot: one kill and restart at a time.
	h.killMu.Lock()
	defer h.killMu.Unlock()
	owner, _ := h.sup.state(sl)
	open := len(h.live.openCalls(owner))
	at, owner := h.sup.kill(sl)
	h.mu.Lock()
	h.kills = append(h.kills, kill{Owner: owner, At: at})
	h.mu.Unlock()
	h.faults.add(at, "worker_kill", owner, fmt.Sprintf("%d calls open%s", open, why))
	if err := h.sup.restart(sl, p); err != nil && ctx.Err() == nil {
		h.note("restart %s: %v", sl.name, err)
	}
}

// killRecoverer SIGKILLs the recovery worker and restarts it after down.
func (h *harness) killRecoverer(ctx context.Context, down time.Duration) {
	at, _ := h.sup.kill(h.recov)
	h.faults.add(at, "recoverer_kill", "recoverer", fmt.Sprintf("restarted after %s", down.Round(10*time.Millisecond)))
	sleepCtx(ctx, down)
	if err := h.sup.restart(h.recov, profile{}); err != nil {
		h.note("restart the recovery worker: %v", err)
	}
}

// clusterFaults runs the node kills and partitions one after another, each
// at its planned time or 2 s after the previous one ended. A fault cut
// short by the end of the workload still restarts its node or heals.
func (h *harness) clusterFaults(ctx context.Context, list []plannedFault) {
	free := h.t0
	for _, pf := range list {
		start := h.t0.Add(pf.At)
		if start.Before(free) {
			start = free
		}
		if !sleepCtx(ctx, time.Until(start)) {
			return
		}
		switch pf.Kind {
		case "node_kill":
			sl := h.nodes[pf.Node]
			at, _ := h.sup.kill(sl)
			h.faults.add(at, "node_kill", sl.name, fmt.Sprintf("down for %s", pf.For))
			out := h.whileOut(ctx, pf.Node, at, pf.For)
			sleepCtx(ctx, pf.For)
			out()
			if err := h.sup.restart(sl, profile{}); err != nil {
				h.note("restart %s: %v", sl.name, err)
			}
			err := waitListening(context.WithoutCancel(ctx), fmt.Sprintf("127.0.0.1:%d", h.net.client[pf.Node]), 30*time.Second)
			h.faults.add(time.Now(), "node_restart", sl.name, errString(err))
		case "partition":
			h.net.Partition(pf.Node)
			at := time.Now()
			h.faults.add(at, "partition", fmt.Sprintf("node-%d", pf.Node), fmt.Sprintf("cut from the others for %s", pf.For))
			out := h.whileOut(ctx, pf.Node, at, pf.For)
			sleepCtx(ctx, pf.For)
			out()
			h.net.Heal()
			h.faults.add(time.Now(), "heal", fmt.Sprintf("node-%d", pf.Node), "")
		}
		free = time.Now().Add(2 * time.Second)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pause freezes a tool worker in the middle of a payment, before its
// charge: pauseLead ahead of the planned time its slot is restarted with
// bodies that wait before their side effect (and the killer leaves it
// alone), so that it owns sessions with payments; at the planned time it
// waits (10 s at most) until one of its payments is started and SIGSTOPs
// it. Unless NoReviewDuringPause, the host and the reviewer handle the
// calls it left while it is frozen — the reviewer finds no charge and signs
// not_executed, the retry charges — and SIGCONT comes after more than a
// lease TTL, so the frozen worker's own charge lands after a truthful
// review: the zombie writer. fctx ends with the workload: a pause not
// started by then is skipped; one started still resumes.
func (h *harness) pause(ctx, fctx context.Context, pf plannedFault) {
	// Lead time: the target is restarted early with bodies that wait
	// before their side effect, and left alone by the killer, so that it
	// owns sessions with payments when the pause comes.
	cand := h.workers[pf.Target]
	if !h.sup.running(cand) {
		if live := h.sup.live("worker"); len(live) > 0 {
			cand = live[0]
		}
	}
	h.sup.reserve(cand)
	defer h.sup.release(cand)
	if _, p := h.sup.state(cand); p.Before <= 0 {
		h.killWorker(ctx, cand, profile{Before: max(h.cfg.ToolDelay, 1500*time.Millisecond)}, ", restarted with a delay before its bodies for a pause")
	}
	if !sleepCtx(fctx, time.Until(h.t0.Add(pf.At))) {
		h.note("pause planned at +%.0fs skipped: the workload ended first", pf.At.Seconds())
		return
	}
	owner, _ := h.sup.state(cand)
	what := "a payment before its charge"
	for deadline := time.Now().Add(10 * time.Second); !h.live.startedPayment(owner); {
		if fctx.Err() != nil {
			h.note("pause planned at +%.0fs skipped: the workload ended while %s waited for a call in flight", pf.At.Seconds(), owner)
			return
		}
		if time.Now().After(deadline) {
			what = "no call in flight"
			if h.live.startedAny(owner) {
				what = "a call in flight (no payment)"
			}
			break
		}
		sleepCtx(fctx, 10*time.Millisecond)
	}
	at, owner, err := h.sup.pause(cand)
	if err != nil {
		h.note("pause of %s: %v", cand.name, err)
		return
	}
	defer func() {
		if err := h.sup.resume(cand); err != nil {
			h.note("resume of %s: %v", cand.name, err)
		}
		h.faults.add(time.Now(), "resume", owner, fmt.Sprintf("after %.1fs", time.Since(at).Seconds()))
	}()
	open := h.live.openCalls(owner)
	h.mu.Lock()
	h.pauseOwners = append(h.pauseOwners, owner)
	h.mu.Unlock()
	h.faults.add(at, "pause", owner, fmt.Sprintf("SIGSTOP on %s, %d calls open", what, len(open)))

	ttl := h.cfg.LeaseTTL
	if !h.cfg.NoReviewDuringPause {
		// The operator acts on each call the frozen worker left started:
		// on its assessment once the recovery worker has fenced the
		// session, or, when none comes within the TTL and 3 s, by asking
		// for a plan anyway (a prepare takes an open call with no live
		// lease over itself). All calls at once, within TTL + 20 s.
		var wg sync.WaitGroup
		for _, c := range open {
			if !c.Started {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var a schema.Assessment
				for deadline := at.Add(ttl + 3*time.Second); time.Now().Before(deadline) && ctx.Err() == nil; sleepCtx(ctx, 50*time.Millisecond) {
					var ok bool
					if a, ok = h.live.assessment(c.Key); ok {
						break
					}
				}
				hctx, cancel := context.WithDeadline(ctx, at.Add(ttl+10*time.Second))
				defer cancel()
				planID, _ := h.handle(hctx, nil, c.Key, a.Decision, false)
				h.mu.Lock()
				h.duringPause++
				h.mu.Unlock()
				for planID != "" && hctx.Err() == nil {
					if _, done := h.live.planRun(planID); done {
						break
					}
					sleepCtx(hctx, 50*time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}
	sleepCtx(ctx, time.Until(at.Add(pf.For)))
}

// pauseLead is how long before a pause its worker is restarted with the
// bodies it needs (it must own sessions by then).
func pauseLead(ttl time.Duration) time.Duration { return 2*ttl + 3*time.Second }

// restoreAll brings every process back once the faults have stopped: the
// routes heal, every node, tool worker and recovery worker that is down is
// started again.
func (h *harness) restoreAll(ctx context.Context) {
	if h.net != nil {
		h.net.Heal()
	}
	for _, sl := range h.sup.ofKind("node") {
		_ = h.sup.restart(sl, profile{})
	}
	for _, sl := range append(h.sup.ofKind("worker"), h.recov) {
		_, p := h.sup.state(sl)
		_ = h.sup.resume(sl)
		_ = h.sup.restart(sl, p)
	}
}

// settle waits until the run's requests have all left the work queue and
// every call is assessed, or, when some call never gets an assessment,
// until nothing has changed for three lease TTLs (8 s at least); at most
// SettleTimeout.
func (h *harness) settle(ctx context.Context, when string) {
	quiet := max(3*h.cfg.LeaseTTL, 8*time.Second)
	deadline := time.Now().Add(h.cfg.SettleTimeout)
	for {
		pending, err := pendingRequests(ctx, h.cl.adminJS, h.runID)
		unsettled, last := h.live.unsettled()
		h.progress.Step(h.step, fmt.Sprintf("settle %s: %d requests queued, %d calls unassessed", when, pending, unsettled))
		if err == nil && pending == 0 {
			if unsettled == 0 && time.Since(last) > time.Second {
				return
			}
			if time.Since(last) > quiet {
				h.note("settle %s: %d calls still without an assessment after %s without any change", when, unsettled, quiet)
				return
			}
		}
		if time.Now().After(deadline) {
			h.note("settle %s: gave up after %s (%d requests queued, %d calls unassessed)", when, h.cfg.SettleTimeout, pending, unsettled)
			return
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// shutdown stops every process and removes the run's directory unless it
// is kept.
func (h *harness) shutdown() {
	if h.live != nil {
		h.live.stop()
	}
	if h.leaders != nil {
		h.leaders.close()
	}
	if h.sup != nil {
		h.sup.stopKind("worker", 5*time.Second)
		h.sup.stopKind("recover", 5*time.Second)
		h.sup.stopKind("node", 10*time.Second)
		h.sup.close()
	}
	if h.cl != nil {
		h.cl.close()
	}
	if h.net != nil {
		h.net.Close()
	}
}

// removeDir removes the run's directory once its report is made, unless
// it is kept: always (Keep), or when the run failed (KeepOnFailure), the
// report then naming it (Report.Dir).
func (h *harness) removeDir(rep *Report) {
	if h.dir == "" || h.cfg.Keep {
		return
	}
	if h.cfg.KeepOnFailure && (rep.Error != "" || len(rep.Failed()) > 0) {
		rep.Dir = h.dir
		h.log.Warn().Str("dir", h.dir).Msg("run failed: its directory is kept")
		return
	}
	if err := os.RemoveAll(h.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Warn().Err(err).Str("dir", h.dir).Msg("remove the run directory")
	}
}
