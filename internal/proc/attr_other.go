//go:build !linux

package proc

import "syscall"

// childAttr puts a child in its own process group, so a terminal's Ctrl-C
// goes to the parent, which stops its children itself.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
