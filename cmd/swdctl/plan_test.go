package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "200": 200, "1KiB": 1024, "4MiB": 4 << 20, " 16KiB ": 16 << 10} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "1GiB", "KiB", "1.5MiB"} {
		_, err := parseBytes(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseHandoff(t *testing.T) {
	c, err := parseHandoff("1KiB=0.4ms,1MiB=50ms")
	require.NoError(t, err)
	assert.Equal(t, []policy.SizeCost{{MaxBytes: 1024, Cost: 400 * time.Microsecond}, {MaxBytes: 1 << 20, Cost: 50 * time.Millisecond}}, c.Handoff)
	c, err = parseHandoff("")
	require.NoError(t, err)
	assert.Empty(t, c.Handoff, "no table: hand-offs cost nothing")
	for _, bad := range []string{"1KiB", "1KiB=x", "1MiB=1ms,1KiB=1ms", "1KiB=-1ms"} {
		_, err := parseHandoff(bad)
		assert.Error(t, err, bad)
	}
}

// swdctl plan with the rule: a 1 MiB body whose hand-off costs more than
// any wait nu's moves save here stays home, and the count says so.
func TestPlanCommandWithCost(t *testing.T) {
	run := func(args ...string) string {
		cmd := planCmd(&globals{output: "table"})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		require.NoError(t, cmd.Execute(), out.String())
		return out.String()
	}
	plain := run("--policy", "nu", "--loads", "5,0,3,8")
	assert.Contains(t, plain, "after  [4 4 4 4]")
	assert.NotContains(t, plain, "held back")
	dear := run("--policy", "nu", "--loads", "5,0,3,8", "--service", "40ms", "--body", "1MiB", "--handoff", "1KiB=0.4ms,1MiB=1s")
	assert.Contains(t, dear, "after  [5 0 3 8]")
	assert.Contains(t, dear, "held back by the transfer-cost rule: 5")
	cheap := run("--policy", "nu", "--loads", "5,0,3,8", "--service", "40ms", "--body", "200", "--handoff", "1KiB=0.4ms,1MiB=1s")
	assert.Contains(t, cheap, "after  [4 4 4 4]")
	assert.Contains(t, cheap, "held back by the transfer-cost rule: 0")
}
