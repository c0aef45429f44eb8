//go:build linux

package cpuset

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Current returns the CPUs the calling thread may run on.
func Current() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return cpusOf(&set), nil
}

func cpusOf(set *unix.CPUSet) []int {
	var out []int
	for c := range MaxCPU {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// Apply pins every thread of the process to cpus (see the package doc). A
// CPU the process may not run on (offline, or outside its cgroup's cpuset)
// is refused: the kernel would silently drop it from the mask, so Apply
// pins its own thread first, reads the mask back and undoes it on a
// mismatch, before touching any other thread.
func Apply(cpus []int) error {
	if err := check(cpus); err != nil {
		return err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("none of CPUs %s is available to this process (it may run on %s)", Format(cpus), Format(cpusOf(&orig)))
		}
		return fmt.Errorf("sched_setaffinity: %w", err)
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(0, &got); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	if got != set {
		_ = unix.SchedSetaffinity(0, &orig)
		for _, c := range cpus {
			if !got.IsSet(c) {
				return fmt.Errorf("CPU %d is not available to this process (of %s the kernel allowed only %s)", c, Format(cpus), Format(cpusOf(&got)))
			}
		}
		return fmt.Errorf("the kernel pinned to CPUs %s instead of %s", Format(cpusOf(&got)), Format(cpus))
	}
	// Threads may start while we pin the others: go over the task list
	// until a pass finds every thread pinned already.
	done := map[int]bool{unix.Gettid(): true}
	for pass := 0; ; pass++ {
		tids, err := threads()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: the thread exited
				return fmt.Errorf("sched_setaffinity on thread %d: %w", tid, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			break
		}
		if pass > 100 {
			return fmt.Errorf("threads keep starting while pinning to CPUs %s", Format(cpus))
		}
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(len(cpus))
	}
	return nil
}

// threads lists the process's thread IDs.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing threads: %w", err)
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}
