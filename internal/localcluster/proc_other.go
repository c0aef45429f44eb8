//go:build !unix

package localcluster

import "syscall"

// procAttr has nothing to set outside Unix: children share the launcher's
// console and are stopped by Stop.
func procAttr() *syscall.SysProcAttr { return nil }
