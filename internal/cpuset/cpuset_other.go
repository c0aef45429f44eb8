//go:build !linux

package cpuset

// Current returns ErrUnsupported: this system has no sched_getaffinity.
func Current() ([]int, error) { return nil, ErrUnsupported }

// Apply returns ErrUnsupported: this system has no sched_setaffinity.
func Apply(cpus []int) error { return ErrUnsupported }
