// Package childproc starts child processes bound to the life of this
// process.
//
// Linux's parent-death signal (SysProcAttr.Pdeathsig) fires when the
// thread that forked the child exits, not the process: a child started
// from an ordinary goroutine may be signalled when the Go runtime retires
// that thread. Start forks every child from one goroutine locked to its
// thread for the life of the process, so the signal fires only when the
// process itself dies. Attr gives the process attributes every SWD child
// gets: its own process group, and the parent-death signal where the
// system has one.
//
// Concurrency: Start is safe for concurrent use; starts are serialised.
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
)

var (
	once     sync.Once
	requests chan request
)

type request struct {
	cmd    *exec.Cmd
	result chan error
}

// Start runs cmd.Start on the dedicated thread and returns its error. The
// caller sets cmd.SysProcAttr (usually Attr's) as it wants.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go forker()
	})
	r := request{cmd: cmd, result: make(chan error, 1)}
	requests <- r
	return <-r.result
}

// forker never returns and never unlocks its thread, which therefore lives
// as long as the process.
func forker() {
	runtime.LockOSThread()
	for r := range requests {
		r.result <- r.cmd.Start()
	}
}
