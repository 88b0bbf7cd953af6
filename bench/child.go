package bench

import (
	"fmt"
	"path/filepath"

	"github.com/jingwei/jingwei/internal/proc"
)

// child is a jingwei child process (worker, recover) with its output in a
// log file.
type child struct{ *proc.Child }

// startChild runs exe with args; stdout and stderr go to dir/<name>.log.
func startChild(exe, dir, name string, args ...string) (*child, error) {
	if exe == "" {
		return nil, ErrNoExecutable
	}
	c, err := proc.Start(proc.Config{Name: name, Exe: exe, Args: args, LogPath: filepath.Join(dir, name+".log")})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &child{c}, nil
}

// exitedErr returns ErrChildExited with the end of the child's log if it
// has exited, nil otherwise.
func (c *child) exitedErr() error {
	if !c.Exited() {
		return nil
	}
	return fmt.Errorf("%w: %s (%v); its log ends with:\n%s", ErrChildExited, c.Name(), c.Err(), c.LogTail(1500))
}
