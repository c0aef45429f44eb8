//go:build unix && !linux

package localcluster

import "syscall"

// procAttr puts a child in its own process group, so a terminal's Ctrl-C
// reaches only the launcher, which stops the cluster in order. There is no
// parent-death signal outside Linux.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
