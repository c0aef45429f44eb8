//go:build !unix

package loadgen

import "os/exec"

func interrupt(cmd *exec.Cmd) error  { return cmd.Process.Kill() }
func killGroup(cmd *exec.Cmd)        { _ = cmd.Process.Kill() }
func interruptedExit(err error) bool { return false }
