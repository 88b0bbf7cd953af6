package chaos

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/internal/proc"
)

// slot is one long-lived process of the run (a NATS node, a tool worker,
// the recovery worker) across its incarnations: every start is a new
// incarnation with its own log file and, for a tool worker, its own owner
// id. Guarded by the supervisor's mutex.
type slot struct {
	name string // node-0, worker-1, recoverer
	kind string // node, worker, recoverer
	// build returns the arguments of incarnation inc and the owner id it
	// writes into leases and fences ("" when the process picks its own).
	build func(inc int, p profile) (args []string, owner string)

	child    *proc.Child
	inc      int
	owner    string
	profile  profile
	down     bool // killed on purpose and not restarted yet
	paused   bool
	reserved bool // held for a pause: the killer leaves it alone
}

// profile is how slow a tool-worker incarnation's bodies are.
type profile struct {
	Before, After time.Duration
}

func (p profile) String() string {
	switch {
	case p.Before > 0:
		return "delay " + p.Before.Round(10*time.Millisecond).String() + " before the side effect"
	case p.After > 0:
		return "delay " + p.After.Round(10*time.Millisecond).String() + " after the side effect"
	}
	return "fast"
}

// supervisor starts, kills, pauses and restarts the run's child processes,
// and restarts (and counts) those that exit by themselves. Safe for
// concurrent use.
type supervisor struct {
	exe  string
	logs string
	// env is added to the environment of every tool worker.
	env []string
	log zerolog.Logger
	t0  time.Time

	mu     sync.Mutex
	slots  []*slot
	exits  map[string]int // unexpected exits by kind
	notes  []string
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newSupervisor(exe, logs string, log zerolog.Logger) *supervisor {
	s := &supervisor{exe: exe, logs: logs, log: log, exits: map[string]int{}, stop: make(chan struct{}), t0: time.Now()}
	s.wg.Add(1)
	go s.watch()
	return s
}

// add registers a slot and starts its first incarnation.
func (s *supervisor) add(name, kind string, p profile, build func(int, profile) ([]string, string)) (*slot, error) {
	sl := &slot{name: name, kind: kind, build: build, profile: p}
	s.mu.Lock()
	s.slots = append(s.slots, sl)
	err := s.startLocked(sl, p)
	s.mu.Unlock()
	return sl, err
}

func (s *supervisor) startLocked(sl *slot, p profile) error {
	if s.closed {
		return fmt.Errorf("chaos: supervisor closed")
	}
	sl.inc++
	args, owner := sl.build(sl.inc, p)
	var env []string
	if sl.kind == "worker" {
		env = s.env
	}
	c, err := proc.Start(proc.Config{Name: fmt.Sprintf("%s#%d", sl.name, sl.inc), Exe: s.exe, Args: args, Env: env,
		LogPath: filepath.Join(s.logs, fmt.Sprintf("%s-%d.log", sl.name, sl.inc))})
	if err != nil {
		return err
	}
	sl.child, sl.owner, sl.profile, sl.down, sl.paused = c, owner, p, false, false
	s.log.Debug().Str("process", sl.name).Int("incarnation", sl.inc).Int("pid", c.PID()).Str("owner", owner).Stringer("profile", p).Msg("started")
	return nil
}

// restart starts a new incarnation of a slot that is down (killed).
func (s *supervisor) restart(sl *slot, p profile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.child != nil && !sl.child.Exited() {
		return nil
	}
	return s.startLocked(sl, p)
}

// kill SIGKILLs a slot's current incarnation and returns when it was
// killed and the owner id it had; the slot stays down until restart.
func (s *supervisor) kill(sl *slot) (time.Time, string) {
	s.mu.Lock()
	c, owner := sl.child, sl.owner
	sl.down = true
	if sl.paused { // a frozen process dies of SIGKILL as well
		sl.paused = false
	}
	s.mu.Unlock()
	if c == nil {
		return time.Now(), owner
	}
	return c.Kill(), owner
}

// pause freezes a slot's process (SIGSTOP).
func (s *supervisor) pause(sl *slot) (time.Time, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.child == nil || sl.child.Exited() {
		return time.Time{}, "", fmt.Errorf("chaos: %s is not running", sl.name)
	}
	at := time.Now()
	if err := syscall.Kill(sl.child.PID(), syscall.SIGSTOP); err != nil {
		return at, "", err
	}
	sl.paused = true
	return at, sl.owner, nil
}

// resume lets a frozen slot run again (SIGCONT).
func (s *supervisor) resume(sl *slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !sl.paused || sl.child == nil || sl.child.Exited() {
		sl.paused = false
		return nil
	}
	sl.paused = false
	return syscall.Kill(sl.child.PID(), syscall.SIGCONT)
}

// live returns the slots of a kind that are running and not frozen.
func (s *supervisor) live(kind string) []*slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*slot
	for _, sl := range s.slots {
		if sl.kind == kind && !sl.down && !sl.paused && !sl.reserved && sl.child != nil && !sl.child.Exited() {
			out = append(out, sl)
		}
	}
	return out
}

// reserve takes a slot out of live (so no kill picks it) until release.
func (s *supervisor) reserve(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl.reserved = true
}

func (s *supervisor) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl.reserved = false
}

// running reports whether a slot's current incarnation runs.
func (s *supervisor) running(sl *slot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sl.child != nil && !sl.child.Exited()
}

// ofKind returns every slot of a kind.
func (s *supervisor) ofKind(kind string) []*slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*slot
	for _, sl := range s.slots {
		if sl.kind == kind {
			out = append(out, sl)
		}
	}
	return out
}

// state returns a slot's owner id and profile.
func (s *supervisor) state(sl *slot) (string, profile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sl.owner, sl.profile
}

// child returns a slot's current incarnation.
func (s *supervisor) child(sl *slot) *proc.Child {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sl.child
}

// watch restarts, after a second, every process that exited although
// nobody killed it, and counts it with the end of its log.
func (s *supervisor) watch() {
	defer s.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var gone []*slot
		for _, sl := range s.slots {
			if !sl.down && sl.child != nil && sl.child.Exited() {
				gone = append(gone, sl)
				sl.down = true
			}
		}
		s.mu.Unlock()
		for _, sl := range gone {
			c := s.child(sl)
			reason := lastLine(c.LogTail(4000))
			s.mu.Lock()
			s.exits[sl.kind]++
			if len(s.notes) < 40 {
				s.notes = append(s.notes, fmt.Sprintf("%s (incarnation %d) exited by itself at +%.1fs (%v): %s", sl.name, sl.inc, time.Since(s.t0).Seconds(), c.Err(), reason))
			}
			s.mu.Unlock()
			s.log.Warn().Str("process", sl.name).Str("reason", reason).Msg("exited by itself; restarting in 1s")
			go func() {
				select {
				case <-s.stop:
					return
				case <-time.After(time.Second):
				}
				_, p := s.state(sl)
				if err := s.restart(sl, p); err != nil {
					s.log.Warn().Err(err).Str("process", sl.name).Msg("restart")
				}
			}()
		}
	}
}

// lastLine returns the last non-empty line of a log, shortened; for a JSON
// log line its error and message fields.
func lastLine(tail string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		return l
	}
	return "(empty log)"
}

// unexpected returns the counts and notes of the processes that exited by
// themselves.
func (s *supervisor) unexpected() (map[string]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.exits))
	for k, v := range s.exits {
		m[k] = v
	}
	return m, append([]string(nil), s.notes...)
}

// stopKind stops every process of a kind: SIGCONT for a frozen one, then
// SIGTERM with grace, then SIGKILL.
func (s *supervisor) stopKind(kind string, grace time.Duration) {
	var list []*proc.Child
	s.mu.Lock()
	for _, sl := range s.slots {
		if sl.kind == kind && sl.child != nil {
			if sl.paused {
				_ = syscall.Kill(sl.child.PID(), syscall.SIGCONT)
				sl.paused = false
			}
			sl.down = true
			list = append(list, sl.child)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Stop(grace)
		}()
	}
	wg.Wait()
}

// close stops the watcher; every process must have been stopped.
func (s *supervisor) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// tail returns the end of a slot's current log, for an error.
func (s *supervisor) tail(sl *slot) string {
	c := s.child(sl)
	if c == nil {
		return ""
	}
	b, err := os.ReadFile(c.LogPath())
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}
