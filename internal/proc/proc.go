// Package proc starts and stops the child processes of the bench and the
// demo: re-executions of the jingwei binary whose output goes to a log file,
// each in its own process group and, on Linux, killed by the kernel if the
// parent dies first.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Config says which child to start. Exe and LogPath are required; the
// other fields may be zero.
type Config struct {
	// Name names the child in errors. Defaults to Exe.
	Name string
	// Exe is the program to run. Required.
	Exe string
	// Args are the program's arguments, without the program name.
	Args []string
	// Env is added to the parent's environment. Nil means the parent's
	// environment unchanged.
	Env []string
	// LogPath is the file, created or truncated, that receives the child's
	// stdout and stderr. Its directory must exist. Required.
	LogPath string
}

func (c Config) validate() error {
	switch {
	case c.Exe == "":
		return fmt.Errorf("%w: Exe is empty", ErrConfig)
	case c.LogPath == "":
		return fmt.Errorf("%w: LogPath is empty", ErrConfig)
	}
	return nil
}

// Child is a started child process. Its methods are safe for concurrent
// use.
type Child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // Wait's error, set before done closes
}

// Start runs cfg.Exe with cfg.Args, its stdout and stderr going to
// cfg.LogPath, and reaps it in the background when it exits.
func Start(cfg Config) (*Child, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Exe
	}
	lf, err := os.Create(cfg.LogPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Exe, cfg.Args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if cfg.Env != nil {
		cmd.Env = append(os.Environ(), cfg.Env...)
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s (%s %v): %w", cfg.Name, cfg.Exe, cfg.Args, err)
	}
	c := &Child{name: cfg.Name, cmd: cmd, logPath: cfg.LogPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	return c, nil
}

// Name returns the child's name (Config.Name).
func (c *Child) Name() string { return c.name }

// PID returns the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// LogPath returns the file that receives the child's output.
func (c *Child) LogPath() string { return c.logPath }

// Done returns a channel closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited and been reaped.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Err returns how the child ended (exec.Cmd.Wait's error: nil for exit
// status 0, an *exec.ExitError otherwise). It is nil while the child runs;
// read it after Done is closed.
func (c *Child) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Kill sends SIGKILL, unless the child has already exited, and waits until
// it is reaped. It returns the time it was called, i.e. just before the
// signal was sent.
func (c *Child) Kill() time.Time {
	at := time.Now()
	if !c.Exited() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
	return at
}

// Stop sends SIGTERM, waits up to grace for the child to drain and exit,
// then kills it. It returns once the child is reaped, at once if it has
// already exited.
func (c *Child) Stop(grace time.Duration) {
	if c.Exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.Kill()
	}
}

// LogTail returns about the last n bytes of the child's log, starting at a
// line boundary when the log is longer than n, or "" if the log cannot be
// read.
func (c *Child) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
