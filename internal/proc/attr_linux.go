package proc

import "syscall"

// childAttr puts a child in its own process group (a terminal's Ctrl-C goes
// to the parent, which stops its children itself) and has the kernel kill it
// if the parent dies first, so nothing is left running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
