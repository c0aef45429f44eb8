//go:build unix && !linux

package loadgen

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts swdctl in its own process group, so a terminal's
// Ctrl-C reaches only loadgen, which then stops swdctl with one SIGINT.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
