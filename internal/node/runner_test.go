package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
)

func TestOnlySamePolicy(t *testing.T) {
	view := func() policy.View {
		return policy.View{Self: 0, Nodes: []policy.NodeLoad{
			{Name: "a", Load: 9, Concurrency: 1, Known: true},
			{Name: "b", Load: 0, Concurrency: 1, Known: true},
			{Name: "c", Load: 0, Concurrency: 1, Known: true},
			{Name: "d", Load: 0, Concurrency: 1, Known: false},
		}}
	}
	all := func(string) bool { return true }
	cases := []struct {
		name    string // what differs between the peers' stamps and ours
		stamps  map[string]cluster.PolicyStamp
		healthy func(string) bool
		known   []bool
	}{
		// Every peer runs nu at epoch 7, as we do: all known peers stay known; d stays stale.
		{"all agree", map[string]cluster.PolicyStamp{"b": {Name: "nu", Epoch: 7}, "c": {Name: "nu", Epoch: 7}, "d": {Name: "nu", Epoch: 7}}, all,
			[]bool{true, true, true, false}},
		// c has not switched yet (older epoch): left out so policies never mix.
		{"older epoch", map[string]cluster.PolicyStamp{"b": {Name: "nu", Epoch: 7}, "c": {Name: "ll", Epoch: 6}}, all,
			[]bool{true, true, false, false}},
		// b already runs a newer epoch: also left out until we adopt it.
		{"newer epoch", map[string]cluster.PolicyStamp{"b": {Name: "ll", Epoch: 8}, "c": {Name: "nu", Epoch: 7}}, all,
			[]bool{true, false, true, false}},
		// Same epoch, another name (nodes started with different --policy at epoch 0).
		{"same epoch other name", map[string]cluster.PolicyStamp{"b": {Name: "ll", Epoch: 7}, "c": {Name: "nu", Epoch: 7}}, all,
			[]bool{true, false, true, false}},
		// No stamp heard from c at all.
		{"no stamp", map[string]cluster.PolicyStamp{"b": {Name: "nu", Epoch: 7}}, all,
			[]bool{true, true, false, false}},
		// b is ejected for failing transfers.
		{"ejected peer", map[string]cluster.PolicyStamp{"b": {Name: "nu", Epoch: 7}, "c": {Name: "nu", Epoch: 7}}, func(n string) bool { return n != "b" },
			[]bool{true, false, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := view()
			got := onlySamePolicy(v, tc.stamps, "nu", 7, tc.healthy)
			var known []bool
			for _, n := range got.Nodes {
				known = append(known, n.Known)
			}
			assert.Equal(t, tc.known, known)
			assert.Equal(t, view(), v, "the input view must not change")
		})
	}
}

func TestPeerHealth(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newPeerHealth(func() time.Time { return now }, func() int { return 2 })
	fail := errors.New("connection reset")
	// Refusals and client-gone errors never count against a peer.
	for i := 0; i < 10; i++ {
		h.record("p", swderr.ErrRefused)
		h.record("p", swderr.ErrClientGone)
	}
	assert.True(t, h.healthy("p"))
	// Two failures: still healthy; the third ejects for 1 s.
	h.record("p", fail)
	h.record("p", fail)
	assert.True(t, h.healthy("p"))
	h.record("p", fail)
	assert.False(t, h.healthy("p"))
	assert.Equal(t, []string{"p"}, h.ejected())
	now = now.Add(1001 * time.Millisecond)
	assert.True(t, h.healthy("p"), "readmitted after the backoff")
	// It fails again at once: ejected for twice as long.
	h.record("p", fail)
	assert.False(t, h.healthy("p"))
	now = now.Add(1500 * time.Millisecond)
	assert.False(t, h.healthy("p"), "second backoff is 2 s")
	now = now.Add(600 * time.Millisecond)
	assert.True(t, h.healthy("p"))
	// A success forgets everything.
	h.record("p", nil)
	h.record("p", fail)
	assert.True(t, h.healthy("p"))
	// Backoff is capped at 30 s.
	for i := 0; i < 20; i++ {
		for k := 0; k < 3; k++ {
			h.record("q", fail)
		}
		now = now.Add(31 * time.Second)
	}
	h.record("q", fail)
	now = now.Add(30*time.Second + time.Millisecond)
	assert.True(t, h.healthy("q"))
}

// A peer whose app answers 5xx is ejected after five in a row, like
// Envoy's consecutive-5xx outlier detection; a good answer forgets them;
// at most half the peers (at least one) are ejected at once. Issue 17,
// item 2.
func TestPeerHealthOutliers(t *testing.T) {
	now := time.Unix(1000, 0)
	peers := 3
	h := newPeerHealth(func() time.Time { return now }, func() int { return peers })
	fivexx := fmt.Errorf("%w: 502", swderr.ErrPeer5xx)
	for range 4 {
		h.record("dead", fivexx)
	}
	assert.True(t, h.healthy("dead"), "four 5xx do not eject")
	h.record("dead", nil)
	for range 4 {
		h.record("dead", fivexx)
	}
	assert.True(t, h.healthy("dead"), "a good answer resets the count")
	h.record("dead", fivexx)
	assert.False(t, h.healthy("dead"), "the fifth 5xx in a row ejects")
	// With 3 peers, one may be ejected: a second outlier stays in.
	for range 5 {
		h.record("also", fivexx)
	}
	assert.True(t, h.healthy("also"), "more than half the peers ejected")
	// With 4 peers, two may be.
	peers = 4
	h.record("also", fivexx)
	assert.False(t, h.healthy("also"))
	assert.ElementsMatch(t, []string{"dead", "also"}, h.ejected())
	// A lone peer can always be ejected.
	lone := newPeerHealth(func() time.Time { return now }, func() int { return 1 })
	for range 5 {
		lone.record("p", fivexx)
	}
	assert.False(t, lone.healthy("p"))
}

func TestAdvertisable(t *testing.T) {
	cases := []struct {
		name                     string // how --grpc, --advertise and --gossip are set
		bound, advertise, gossip string
		want                     string
	}{
		// A specific bound address is advertised as it is.
		{"specific", "10.0.0.5:7070", "", "10.0.0.5:7946", "10.0.0.5:7070"},
		// A wildcard takes --advertise's host, with or without a port.
		{"advertise with port", "0.0.0.0:7070", "10.0.0.6:7946", "0.0.0.0:7946", "10.0.0.6:7070"},
		{"advertise without port", "0.0.0.0:7070", "10.0.0.6", "0.0.0.0:7946", "10.0.0.6:7070"},
		// Else the gossip bind host, when it is specific.
		{"gossip host", "[::]:7070", "", "10.0.0.7:7946", "10.0.0.7:7070"},
		// Loopback everywhere stays loopback.
		{"loopback", "127.0.0.1:7070", "", "127.0.0.1:7946", "127.0.0.1:7070"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, advertisable(tc.bound, tc.advertise, tc.gossip))
		})
	}
	// Everything a wildcard: a private IP of this host, or loopback.
	got := advertisable("0.0.0.0:7070", "", "0.0.0.0:7946")
	assert.True(t, strings.HasSuffix(got, ":7070"), got)
	assert.False(t, unspecified(got), got)
}
