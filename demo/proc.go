package demo

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/jingwei/jingwei/internal/proc"
)

// children starts and stops the demo's child processes: re-execs of the
// jingwei binary. Every child is stopped by stopAll, on every exit path of
// Run.
type children struct {
	exe string
	dir string
	env []string

	mu   sync.Mutex
	list []*proc.Child
}

// start runs exe with args as a child named name; its stdout and stderr go
// to <dir>/<name>.log.
func (cs *children) start(name string, args ...string) (*proc.Child, error) {
	c, err := proc.Start(proc.Config{Name: name, Exe: cs.exe, Args: args, Env: cs.env,
		LogPath: filepath.Join(cs.dir, name+".log")})
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
	return c, nil
}

// stopAll stops every child that is still running, in parallel, each with
// grace to drain.
func (cs *children) stopAll(grace time.Duration) {
	cs.mu.Lock()
	list := append([]*proc.Child(nil), cs.list...)
	cs.mu.Unlock()
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

// failed returns the first child that exited on its own (not killed by the
// demo) with its log tail, or nil.
func (cs *children) failed(expectedDead map[*proc.Child]bool) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.list {
		if c.Exited() && !expectedDead[c] {
			return fmt.Errorf("%w: %s exited (%v); its log ends with:\n%s", ErrChildFailed, c.Name(), c.Err(), c.LogTail(2000))
		}
	}
	return nil
}

// waitReady waits until ready returns true, polling every 25 ms, or until
// ctx ends or a child dies.
func (cs *children) waitReady(ctx context.Context, what string, ready func() bool, dead map[*proc.Child]bool) error {
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
