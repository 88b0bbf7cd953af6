package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sh starts `sh -c script` with its log in a fresh temporary directory.
func sh(t *testing.T, script string, env ...string) *Child {
	t.Helper()
	exe, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	c, err := Start(Config{Name: "sh", Exe: exe, Args: []string{"-c", script}, Env: env,
		LogPath: filepath.Join(t.TempDir(), "sh.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Kill() })
	return c
}

// waitLog polls the child's log until it contains want.
func waitLog(t *testing.T, c *Child, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.LogTail(1<<20), want) {
		if c.Exited() {
			t.Fatalf("child exited (%v) before logging %q; log: %q", c.Err(), want, c.LogTail(1<<20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never contained %q: %q", want, c.LogTail(1<<20))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// signaled returns the signal that ended the child, or 0.
func signaled(err error) syscall.Signal {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

func TestStartLogsOutputAndEnv(t *testing.T) {
	c := sh(t, `echo "out $PROC_TEST_VALUE"; echo err >&2`, "PROC_TEST_VALUE=v1")
	<-c.Done()
	if !c.Exited() || c.Err() != nil {
		t.Fatalf("Exited %v Err %v, want true, nil", c.Exited(), c.Err())
	}
	b, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "out v1\nerr\n" {
		t.Fatalf("log %q, want stdout then stderr", got)
	}
	if c.PID() <= 0 || c.Name() != "sh" {
		t.Fatalf("PID %d Name %q", c.PID(), c.Name())
	}
}

func TestExitStatus(t *testing.T) {
	c := sh(t, "exit 7")
	<-c.Done()
	var ee *exec.ExitError
	if !errors.As(c.Err(), &ee) || ee.ExitCode() != 7 {
		t.Fatalf("Err %v, want exit status 7", c.Err())
	}
}

func TestKillReaps(t *testing.T) {
	c := sh(t, "echo ready; exec sleep 60")
	waitLog(t, c, "ready")
	if c.Exited() || c.Err() != nil {
		t.Fatalf("running child: Exited %v Err %v", c.Exited(), c.Err())
	}
	before := time.Now()
	at := c.Kill()
	if at.Before(before) || at.After(time.Now()) {
		t.Fatalf("Kill returned %v, not the time it was called (%v)", at, before)
	}
	if !c.Exited() {
		t.Fatal("Kill returned before the child was reaped")
	}
	if sig := signaled(c.Err()); sig != syscall.SIGKILL {
		t.Fatalf("Err %v, want killed by SIGKILL", c.Err())
	}
	c.Kill() // a second kill of a reaped child returns at once
}

func TestStopSendsTermFirst(t *testing.T) {
	c := sh(t, `trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	waitLog(t, c, "ready")
	c.Stop(time.Minute) // the child exits on TERM long before the grace ends
	var ee *exec.ExitError
	if !errors.As(c.Err(), &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Err %v, want exit status 3 from the TERM trap", c.Err())
	}
	if !strings.Contains(c.LogTail(100), "term") {
		t.Fatalf("log %q has no trace of SIGTERM", c.LogTail(100))
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	// An ignored signal stays ignored across exec: sleep ignores SIGTERM.
	c := sh(t, `trap '' TERM; echo ready; exec sleep 60`)
	waitLog(t, c, "ready")
	c.Stop(50 * time.Millisecond)
	if !c.Exited() {
		t.Fatal("Stop returned before the child was reaped")
	}
	if sig := signaled(c.Err()); sig != syscall.SIGKILL {
		t.Fatalf("Err %v, want killed by SIGKILL after the grace", c.Err())
	}
	c.Stop(time.Minute) // an exited child: returns at once
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		is   error
		want string
	}{
		{"no exe", Config{LogPath: filepath.Join(dir, "a.log")}, ErrConfig, "Exe"},
		{"no log path", Config{Exe: "sh"}, ErrConfig, "LogPath"},
		{"log dir missing", Config{Exe: "sh", LogPath: filepath.Join(dir, "none", "a.log")}, os.ErrNotExist, "none"},
		{"exe missing", Config{Name: "ghost", Exe: filepath.Join(dir, "no-such-exe"), LogPath: filepath.Join(dir, "b.log")}, os.ErrNotExist, "start ghost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(tc.cfg)
			if c != nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, %v; want an error that is %v and names %q", c, err, tc.is, tc.want)
			}
		})
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, log string
		n         int
		want      string
	}{
		{"short log whole", "a\nb\n", 100, "a\nb\n"},
		{"cut at a line start", "first line\nsecond\nthird\n", 10, "third\n"},
		{"no newline in the tail", "abcdefghij", 4, "ghij"},
		{"empty", "", 10, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".log")
			if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			c := &Child{logPath: p}
			if got := c.LogTail(tc.n); got != tc.want {
				t.Fatalf("LogTail(%d) = %q, want %q", tc.n, got, tc.want)
			}
		})
	}
	if got := (&Child{logPath: filepath.Join(dir, "missing.log")}).LogTail(10); got != "" {
		t.Fatalf("LogTail of a missing log = %q, want empty", got)
	}
}
