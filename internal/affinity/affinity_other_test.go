//go:build !linux

package affinity

import "testing"

func threadMasks() (map[int][]int, error) { return nil, ErrUnsupported }

func unsetenv(*testing.T) {}
