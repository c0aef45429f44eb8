package cpuset

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	cases := []struct {
		list string
		want []int
		err  string // substring; "" for valid
	}{
		// One CPU, a list, a range, a mix (sorted, duplicates merged).
		{"0", []int{0}, ""},
		{"1,0", []int{0, 1}, ""},
		{"2-4", []int{2, 3, 4}, ""},
		{" 0, 2-3 ,3", []int{0, 2, 3}, ""},
		{"5-5", []int{5}, ""},
		// Refused: empty, words, negatives, open or backward ranges, CPUs
		// beyond the kernel's set size.
		{"", nil, "empty CPU list"},
		{"a", nil, `"a" is not a CPU number or range`},
		{"0,,1", nil, `"" is not a CPU number`},
		{"-1", nil, `"-1" is not a CPU number`},
		{"1-", nil, `"1-" is not a CPU number`},
		{"3-1", nil, "runs backwards"},
		{"1024", nil, "out of range [0, 1024)"},
		{"0-2000", nil, "out of range"},
	}
	for _, tc := range cases {
		got, err := Parse(tc.list)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%q", tc.list)
			continue
		}
		require.NoError(t, err, "%q", tc.list)
		assert.Equal(t, tc.want, got, "%q", tc.list)
		back, err := Parse(Format(got))
		require.NoError(t, err)
		assert.Equal(t, got, back, "Format(%v) = %q parses back", got, Format(got))
	}
	assert.Equal(t, "0,2-4,7", Format([]int{7, 2, 3, 4, 0, 3}))
}

// TestApplyPinsEveryThread pins this test process to one CPU it may run on,
// reads the mask back from every thread (also threads started after), then
// restores the original mask.
func TestApplyPinsEveryThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := Current()
		require.ErrorIs(t, err, ErrUnsupported)
		require.ErrorIs(t, Apply([]int{0}), ErrUnsupported)
		return
	}
	t.Setenv("GOMAXPROCS", "") // restored after; unset below: Apply lowers GOMAXPROCS only when it is not set
	allowed, err := Current()
	require.NoError(t, err)
	require.NotEmpty(t, allowed)
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		require.NoError(t, Apply(allowed))
		runtime.GOMAXPROCS(procs)
	})
	unsetenv(t)
	last := allowed[len(allowed)-1]
	require.NoError(t, Apply([]int{last}))
	assert.Equal(t, 1, runtime.GOMAXPROCS(0))
	// Start more threads: they inherit the mask.
	done := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			<-done
		}()
	}
	defer close(done)
	masks, err := threadMasks()
	require.NoError(t, err)
	require.NotEmpty(t, masks)
	for tid, m := range masks {
		assert.Equal(t, []int{last}, m, "thread %d", tid)
	}
	// A CPU the process may not use is refused, alone or beside one it
	// may, and nothing changes.
	require.ErrorContains(t, Apply([]int{MaxCPU - 1}), "none of CPUs 1023 is available to this process")
	require.ErrorContains(t, Apply([]int{last, MaxCPU - 1}), "CPU 1023 is not available to this process")
	require.ErrorContains(t, Apply(nil), "no CPU to pin to")
	masks, err = threadMasks()
	require.NoError(t, err)
	for tid, m := range masks {
		assert.Equal(t, []int{last}, m, "thread %d after the refusals", tid)
	}
}
