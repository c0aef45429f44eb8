// Package cpuset pins a process to a set of CPUs: swd --cpus and dummyapp
// --cpus, so that the daemon and its app can be kept off each other's
// cores (paper 003, SPLiT, places work on cores with sched_setaffinity;
// docs/performance.md, "Core placement", measures what it changes here).
//
// A CPU list is the kernel's cpuset syntax: comma-separated CPU numbers and
// inclusive ranges, "0", "1-3", "0,2-3". Parse checks the syntax, Apply
// refuses a CPU the process may not run on and pins every thread of the
// process (Linux: sched_setaffinity on each task; threads
// the Go runtime starts later inherit the mask from the thread that starts
// them), then lowers GOMAXPROCS to the CPU count unless the GOMAXPROCS
// environment variable sets it. Other systems have no such call: Apply
// returns ErrUnsupported there.
//
// Concurrency: Parse and Current are safe for concurrent use. Apply
// changes process-wide state: call it once, at start-up, before serving.
package cpuset

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers a list may name (the kernel's default
// CPU_SETSIZE).
const MaxCPU = 1024

// ErrUnsupported is returned by Apply and Current on systems without
// sched_setaffinity.
var ErrUnsupported = errors.New("pinning to CPUs (--cpus) is supported on Linux only")

// Parse turns a CPU list ("0,2-3") into sorted, distinct CPU numbers.
func Parse(list string) ([]int, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return nil, errors.New("empty CPU list: give CPU numbers and ranges, e.g. 0 or 0,2-3")
	}
	var out []int
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo, part)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi, part); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("CPU range %q runs backwards", part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func cpuNumber(s, part string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, fmt.Errorf("CPU list element %q is not a CPU number or range (e.g. 0 or 2-3)", part)
	case n < 0 || n >= MaxCPU:
		return 0, fmt.Errorf("CPU %d in %q is out of range [0, %d)", n, part, MaxCPU)
	}
	return n, nil
}

// Format is the inverse of Parse: sorted CPUs as a list with ranges.
func Format(cpus []int) string {
	cs := slices.Clone(cpus)
	slices.Sort(cs)
	cs = slices.Compact(cs)
	var b strings.Builder
	for i := 0; i < len(cs); {
		j := i
		for j+1 < len(cs) && cs[j+1] == cs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cs[j]))
		}
		i = j + 1
	}
	return b.String()
}

// check refuses an empty CPU set.
func check(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("no CPU to pin to")
	}
	return nil
}
