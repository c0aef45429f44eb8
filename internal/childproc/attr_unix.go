//go:build unix && !linux

package childproc

import "syscall"

// Attr puts a child in its own process group, so a terminal's Ctrl-C
// reaches only the parent, which stops its children in order. There is no
// parent-death signal outside Linux: sig is unused, and a parent killed
// with SIGKILL leaves its children running.
func Attr(sig syscall.Signal) *syscall.SysProcAttr {
	_ = sig
	return &syscall.SysProcAttr{Setpgid: true}
}
