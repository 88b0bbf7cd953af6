package bench

import "errors"

var (
	// ErrInvalidConfig is returned by Run for a Config with an invalid
	// field; the message names it.
	ErrInvalidConfig = errors.New("bench: invalid config")
	// ErrScenarioFailed is returned by Run when at least one scenario could
	// not run (its rows carry the error); the other rows are valid.
	ErrScenarioFailed = errors.New("bench: scenario failed")
	// ErrNoExecutable is the error of the crash and memory scenarios when
	// Config.Exe is empty: they run the jingwei binary as a child process.
	ErrNoExecutable = errors.New("bench: no jingwei executable to run child processes (Config.Exe)")
	// ErrChildExited is returned when a child process (jingwei worker or
	// recover) exits before the scenario is done with it; the message
	// carries the end of its log.
	ErrChildExited = errors.New("bench: child process exited")
)
