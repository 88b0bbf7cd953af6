package bench

import "syscall"

// childAttr puts a child in its own process group (a terminal's Ctrl-C goes
// to the bench, which stops its children itself) and has the kernel kill it
// if the bench dies first, so nothing is left running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
