package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bodyConfig is 8 nodes under nu at 85 % load, a fifth of the requests
// with 1 MiB bodies.
func bodyConfig() Config {
	c := short(20 * time.Second)
	c.Nodes, c.Rate = 8, 170
	c.Bodies = BodyMix{SmallBytes: 200, LargeBytes: 1 << 20, LargeShare: 0.2}
	return c
}

func TestCostConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Config)
	}{
		{"negative body", func(c *Config) { c.Bodies.LargeBytes = -1 }},
		{"share above 1", func(c *Config) { c.Bodies.LargeShare = 1.5 }},
		{"share NaN", func(c *Config) { c.Bodies.LargeShare = nan() }},
		{"negative hand-off per MiB", func(c *Config) { c.HandoffPerMiB = -time.Millisecond }},
	} {
		c := bodyConfig()
		tt.mod(&c)
		assert.Error(t, c.Validate(), tt.name)
	}
	require.NoError(t, bodyConfig().Validate())
}

func nan() float64 { z := 0.0; return z / z }

// Bodies that move for free and no rule: the run is the run without
// bodies, request for request (bodies only matter through hand-off time).
func TestFreeBodiesChangeNothing(t *testing.T) {
	c := bodyConfig()
	with, err := Run(c)
	require.NoError(t, err)
	c.Bodies = BodyMix{}
	without, err := Run(c)
	require.NoError(t, err)
	assert.Equal(t, without.ResponseTimes, with.ResponseTimes)
	assert.Equal(t, without.Moves, with.Moves)
	assert.Positive(t, with.MovedBytes)
	assert.Zero(t, without.MovedBytes)
}

// With the rule and a hand-off no wait can pay for (an hour per MiB, and
// only 1 MiB bodies), nothing moves: the run is policy none's, request for
// request, and every planned move was held back.
func TestProhibitiveCostMovesNothing(t *testing.T) {
	c := bodyConfig()
	c.Bodies = BodyMix{LargeBytes: 1 << 20, LargeShare: 1}
	c.HandoffPerMiB = time.Hour
	c.TransferCost = true
	ruled, err := Run(c)
	require.NoError(t, err)
	assert.Zero(t, ruled.Moves)
	assert.Positive(t, ruled.HeldBack)
	c.Policy, c.TransferCost = "none", false
	none, err := Run(c)
	require.NoError(t, err)
	assert.Equal(t, none.ResponseTimes, ruled.ResponseTimes)
}

// With the rule, large bodies that cost more to move than the wait they
// save stay home: fewer bytes move than without the rule, on the same
// requests; the runs are deterministic.
func TestRuleKeepsLargeBodiesHome(t *testing.T) {
	c := bodyConfig()
	c.HandoffPerMiB = 60 * time.Millisecond // slower than a 40 ms request
	off, err := Run(c)
	require.NoError(t, err)
	c.TransferCost = true
	on, err := Run(c)
	require.NoError(t, err)
	again, err := Run(c)
	require.NoError(t, err)
	assert.Equal(t, on.ResponseTimes, again.ResponseTimes, "deterministic")
	assert.Positive(t, on.HeldBack)
	assert.Less(t, float64(on.MovedBytes)/float64(max(on.Moves, 1)), float64(off.MovedBytes)/float64(max(off.Moves, 1)),
		"the rule moves smaller bodies on average (off: %d bytes in %d moves, on: %d in %d)", off.MovedBytes, off.Moves, on.MovedBytes, on.Moves)
	assert.Zero(t, off.HeldBack)
}
