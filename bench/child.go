package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// child is a jingwei child process (worker, recover) with its output in a
// log file.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process is reaped
	err     error         // Wait's error, set before done closes
}

// startChild runs exe with args; stdout and stderr go to dir/<name>.log.
func startChild(exe, dir, name string, args ...string) (*child, error) {
	if exe == "" {
		return nil, ErrNoExecutable
	}
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("bench: start %s %v: %w", exe, args, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until the process is reaped; it returns
// when the kill was sent.
func (c *child) kill() time.Time {
	at := time.Now()
	if !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
	return at
}

// stop sends SIGTERM, waits up to 10 s, then kills.
func (c *child) stop() {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
	}
}

// exitedErr returns ErrChildExited with the end of the child's log if it
// has exited, nil otherwise.
func (c *child) exitedErr() error {
	if !c.exited() {
		return nil
	}
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Errorf("%w: %s (%v); its log ends with:\n%s", ErrChildExited, c.name, c.err, b)
}
