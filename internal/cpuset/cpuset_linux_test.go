//go:build linux

package cpuset

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// threadMasks reads every thread's CPU mask back from the kernel.
func threadMasks() (map[int][]int, error) {
	tids, err := threads()
	if err != nil {
		return nil, err
	}
	out := map[int][]int{}
	for _, tid := range tids {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // the thread exited meanwhile
		}
		out[tid] = cpusOf(&set)
	}
	return out, nil
}

// unsetenv removes GOMAXPROCS for the test (t.Setenv restores it).
func unsetenv(t *testing.T) {
	t.Helper()
	if err := os.Unsetenv("GOMAXPROCS"); err != nil {
		t.Fatal(err)
	}
}
