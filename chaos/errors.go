package chaos

import "errors"

var (
	// ErrInvalidConfig is returned by Run (and RunNode) for a Config with
	// an invalid field; the message names it.
	ErrInvalidConfig = errors.New("chaos: invalid config")
	// ErrNoExecutable is returned by Run when Config.Exe is empty: every
	// process of the run (NATS nodes, tool workers, the recovery worker,
	// the set-up) is the jingwei binary run as a child process.
	ErrNoExecutable = errors.New("chaos: no jingwei executable for the child processes (Config.Exe)")
	// ErrNotReady is returned by Run when the deployment does not come up
	// (the nodes do not listen, the set-up keeps failing, the service does
	// not answer) within Config.StartTimeout; the message says what was
	// awaited and ends with the relevant log tail.
	ErrNotReady = errors.New("chaos: deployment not ready")
	// ErrInvariantFailed is returned by Report.Err when a must-hold row of
	// the report was not met (`jingwei chaos` exits 1).
	ErrInvariantFailed = errors.New("chaos: invariant failed")
)
