package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyRotation: three members rotate their gossip key (install the new
// one everywhere, switch everywhere, remove the old one everywhere) while
// every member keeps seeing every other as a fresh, known node at each
// step; afterwards a member with only the new key joins and one with only
// the old key cannot.
func TestKeyRotation(t *testing.T) {
	checkLeaks(t)
	oldKey := []byte("0123456789abcdef0123456789abcdef")
	newKey := []byte("fedcba9876543210fedcba9876543210")
	var nodes []tnode
	for i, name := range []string{"rot-a", "rot-b", "rot-c"} {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].GossipAddr()}
		}
		cfg := testConfig(name, seeds...)
		cfg.GossipKey = oldKey
		nodes = append(nodes, start(t, cfg, newLocal(i+1)))
	}
	waitMembers(t, nodes, 3)
	healthy := func(step string) {
		t.Helper()
		for _, n := range nodes {
			require.Eventually(t, func() bool { return n.Members() == 3 && allKnown(n, 3) }, waitShort, poll, "%s: %s lost a member", step, n.Ring())
		}
		// Stay healthy for a while: entries keep arriving with the keys
		// in force (a stale entry would mean dropped gossip).
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			for _, n := range nodes {
				require.Equal(t, 3, n.Members(), "%s: a member dropped out", step)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, n := range nodes {
			require.True(t, allKnown(n, 3), "%s: stale entries", step)
		}
	}
	fp, err := nodes[0].KeyFingerprints()
	require.NoError(t, err)
	assert.Equal(t, []string{Fingerprint(oldKey)}, fp)

	for _, n := range nodes {
		require.NoError(t, n.InstallKey(newKey))
	}
	healthy("after install")
	for _, n := range nodes {
		require.NoError(t, n.UseKey(newKey))
		healthy("switching " + n.Ring()[0])
	}
	for _, n := range nodes {
		require.Error(t, n.RemoveKey(newKey), "the primary key cannot be removed")
		require.NoError(t, n.RemoveKey(oldKey))
	}
	healthy("after removing the old key")
	fp, err = nodes[0].KeyFingerprints()
	require.NoError(t, err)
	assert.Equal(t, []string{Fingerprint(newKey)}, fp)

	oldOnly := testConfig("rot-old", nodes[0].GossipAddr())
	oldOnly.GossipKey = oldKey
	o := start(t, oldOnly, newLocal(1))
	require.Eventually(t, func() bool { return o.Stats().JoinAttempts >= 2 }, waitShort, poll)
	assert.False(t, nodes[0].IsMember("rot-old"), "a member with the removed key joined")

	newOnly := testConfig("rot-new", nodes[0].GossipAddr())
	newOnly.GossipKey = newKey
	nn := start(t, newOnly, newLocal(1))
	waitMembers(t, append(nodes, nn), 4)
}

// TestKeysNeedEncryption: without a gossip key, key operations explain
// what to do.
func TestKeysNeedEncryption(t *testing.T) {
	checkLeaks(t)
	n := start(t, testConfig("plain-a"), newLocal(1))
	for _, err := range []error{n.InstallKey(make([]byte, 16)), n.UseKey(make([]byte, 16)), n.RemoveKey(make([]byte, 16))} {
		assert.ErrorIs(t, err, ErrNoEncryption)
	}
	_, err := n.KeyFingerprints()
	assert.ErrorIs(t, err, ErrNoEncryption)
}

// TestMute: a muted member stays a member, but the others see its load
// entry go stale, and it still sees theirs.
func TestMute(t *testing.T) {
	checkLeaks(t)
	a := start(t, testConfig("mute-a"), newLocal(1))
	b := start(t, testConfig("mute-b", a.GossipAddr()), newLocal(2))
	waitMembers(t, []tnode{a, b}, 2)
	require.Eventually(t, func() bool { return allKnown(a, 2) && allKnown(b, 2) }, waitShort, poll)
	b.Mute()
	require.Eventually(t, func() bool {
		p, ok := a.Peer("mute-b")
		return ok && !p.Known
	}, waitShort, poll, "a muted member's entry must go stale")
	assert.True(t, a.IsMember("mute-b"), "a muted member stays a member")
	assert.True(t, allKnown(b, 2), "a muted member still hears the others")
}
