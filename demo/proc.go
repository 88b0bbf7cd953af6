package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// child is one child process of the demo: a re-exec of the jingwei binary.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // Wait's error, set before done closes
}

// children starts and stops the demo's child processes. Every child is
// stopped by stopAll, on every exit path of Run.
type children struct {
	exe string
	dir string
	env []string

	mu   sync.Mutex
	list []*child
}

// start runs exe with args as a child named name; its stdout and stderr go
// to <dir>/<name>.log.
func (cs *children) start(name string, args ...string) (*child, error) {
	logPath := filepath.Join(cs.dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cs.exe, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), cs.env...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s (%s %v): %w", name, cs.exe, args, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
	return c, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (c *child) kill() {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop sends SIGTERM, waits up to grace for the child to drain and exit,
// then kills it.
func (c *child) stop(grace time.Duration) {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.kill()
	}
}

// logTail returns the last n bytes of the child's log.
func (c *child) logTail(n int) string {
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

// stopAll stops every child that is still running, in parallel, each with
// grace to drain.
func (cs *children) stopAll(grace time.Duration) {
	cs.mu.Lock()
	list := append([]*child(nil), cs.list...)
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.stop(grace)
		}()
	}
	wg.Wait()
}

// failed returns the first child that exited on its own (not killed by the
// demo) with its log tail, or nil.
func (cs *children) failed(expectedDead map[*child]bool) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.list {
		if c.exited() && !expectedDead[c] {
			return fmt.Errorf("%w: %s exited (%v); its log ends with:\n%s", ErrChildFailed, c.name, c.err, c.logTail(2000))
		}
	}
	return nil
}

// waitReady waits until ready returns true, polling every 25 ms, or until
// ctx ends or a child dies.
func (cs *children) waitReady(ctx context.Context, what string, ready func() bool, dead map[*child]bool) error {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for !ready() {
		if err := cs.failed(dead); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}

// errIsKilled reports whether a child's exit error is a kill by signal.
func errIsKilled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
