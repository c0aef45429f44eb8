//go:build unix

package loadgen

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

func interrupt(cmd *exec.Cmd) error { return cmd.Process.Signal(os.Interrupt) }

// killGroup kills the process group of cmd (its id is cmd's pid).
func killGroup(cmd *exec.Cmd) {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = cmd.Process.Kill()
	}
}

// interruptedExit reports whether err is the exit of a process that died
// of SIGINT (a clean stop for our purposes).
func interruptedExit(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
		return ws.Signaled() && ws.Signal() == syscall.SIGINT || ws.ExitStatus() == 130
	}
	return false
}
