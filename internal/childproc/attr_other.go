//go:build !unix

package childproc

import "syscall"

// Attr has nothing to set outside Unix: children share the parent's
// console and are stopped by the parent.
func Attr(sig syscall.Signal) *syscall.SysProcAttr {
	_ = sig
	return nil
}
