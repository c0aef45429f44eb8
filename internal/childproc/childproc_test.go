package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The main goroutine keeps the main thread, which the runtime never lets
// exit: every goroutine that locks a thread in these tests gets one that
// ends with it.
func init() { runtime.LockOSThread() }

// Children started from many goroutines at once all start, with the
// attributes the caller set, and a missing program is an error.
func TestStart(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
			assert.NoError(t, Start(cmd))
			assert.NoError(t, cmd.Wait())
		}()
	}
	wg.Wait()
	err := Start(exec.Command("/nonexistent/program"))
	require.Error(t, err)
}

// The parent-death signal reaches a child started by Start only when this
// process dies, not when the caller's thread does: a control child forked
// directly from a thread that then exits is killed; the child Start forked
// for a caller whose thread exited first still runs.
func TestChildOutlivesCallerThread(t *testing.T) {
	startOn := func(start func(*exec.Cmd) error) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			done <- start(cmd)
		}()
		require.NoError(t, <-done)
		return cmd
	}
	bound := startOn(Start)
	defer func() { _ = bound.Process.Kill() }()
	boundExit := make(chan error, 1)
	go func() { boundExit <- bound.Wait() }()

	control := startOn((*exec.Cmd).Start)
	err := control.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the control child dies with its thread")
	assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())

	select {
	case err := <-boundExit:
		t.Fatalf("the child started by Start died with its caller's thread: %v", err)
	default:
	}
}
