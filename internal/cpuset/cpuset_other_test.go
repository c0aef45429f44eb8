//go:build !linux

package cpuset

import "testing"

func threadMasks() (map[int][]int, error) { return nil, ErrUnsupported }

func unsetenv(*testing.T) {}
