//go:build linux

package loadgen

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts swdctl in its own process group, so a terminal's
// Ctrl-C reaches only loadgen, which then stops swdctl with one SIGINT;
// should loadgen die without stopping it, swdctl gets SIGINT anyway
// (parent-death signal) and stops its cluster.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT}
}
