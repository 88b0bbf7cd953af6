package demo

import "syscall"

// childAttr puts a child in its own process group (a terminal's Ctrl-C goes
// to the demo, which stops its children in order) and has the kernel kill it
// if the demo process dies first, so nothing is left running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
