//go:build linux

package childproc

import "syscall"

// Attr puts a child in its own process group (a terminal's Ctrl-C reaches
// only the parent, which stops its children in order) and has Linux send it
// sig when the parent dies. Start the command with Start, so that the
// signal means the process's death and not a retired thread's.
func Attr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
}
