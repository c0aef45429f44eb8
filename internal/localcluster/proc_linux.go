//go:build linux

package localcluster

import "syscall"

// procAttr puts a child in its own process group (a terminal's Ctrl-C
// reaches only the launcher, which stops the cluster in order) and has Linux
// SIGKILL it when the launcher's spawning thread dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
