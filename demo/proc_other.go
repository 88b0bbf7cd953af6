//go:build !linux

package demo

import "syscall"

// childAttr puts a child in its own process group, so a terminal's Ctrl-C
// goes to the demo, which stops its children in order.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
