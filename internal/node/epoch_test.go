package node

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cluster"
)

// A policy epoch far ahead of the node's clock (a rogue member's
// MaxInt64) is ignored, so the operator's next switch still wins; an epoch
// a little ahead (clock skew) is taken. Issue 17, item 5.
func TestFarFutureEpochIgnored(t *testing.T) {
	c := DefaultConfig()
	c.NodeName = "node-a"
	n, err := New(c)
	require.NoError(t, err)
	now := time.Now().UnixMilli()
	cases := []struct {
		name   string
		policy string
		epoch  int64
		ok     bool
	}{
		// The rogue's epoch: refused, the policy stays.
		{"max int64", "none", math.MaxInt64, false},
		// Just past the bound: refused.
		{"beyond the lead", "none", now + cluster.MaxEpochLead.Milliseconds() + 60_000, false},
		// A minute ahead (a node with a fast clock): taken.
		{"clock skew", "ll", now + 60_000, true},
	}
	for _, tc := range cases {
		before := n.Policy()
		got, err := n.ApplyPolicy(tc.policy, tc.epoch, 0)
		if !tc.ok {
			assert.ErrorContains(t, err, "ahead of this node's clock", tc.name)
			assert.Equal(t, before, got, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.policy, got.Name, tc.name)
	}
	// The operator's next epoch is above the skewed one and is taken.
	next := n.NextEpoch()
	assert.Greater(t, next, now+60_000)
	got, err := n.ApplyPolicy("nu", next, 0)
	require.NoError(t, err)
	assert.Equal(t, "nu", got.Name)
}
