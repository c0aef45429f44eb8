package localcluster

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPortCandidates(t *testing.T) {
	cases := []struct {
		name   string
		lo, hi int
		want   [][2]int
	}{
		// Linux's default: below and above the ephemeral range.
		{"linux default", 32768, 60999, [][2]int{{10000, 32767}, {61000, 65535}}},
		// IANA's dynamic range (BSDs, macOS): everything below it.
		{"iana", 49152, 65535, [][2]int{{10000, 49151}}},
		// A range starting low leaves only the ports above it.
		{"low range", 1024, 30000, [][2]int{{30001, 65535}}},
		// A range covering almost everything leaves too few: the kernel picks.
		{"everything", 1024, 65000, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, portCandidates(c.lo, c.hi))
		})
	}
}

func TestPickPort(t *testing.T) {
	cases := []struct {
		name   string
		ranges [][2]int
		want   int
	}{
		// No candidates: 0, the kernel picks.
		{"none", nil, 0},
		// One port in one range.
		{"one port", [][2]int{{12345, 12345}}, 12345},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, pickPort(c.ranges))
		})
	}
	// Every pick from two ranges lies in one of them, and both are drawn.
	ranges := [][2]int{{20000, 20003}, {40000, 40003}}
	seen := map[int]bool{}
	for range 1000 {
		p := pickPort(ranges)
		require.True(t, (p >= 20000 && p <= 20003) || (p >= 40000 && p <= 40003), "port %d", p)
		seen[p] = true
	}
	assert.Len(t, seen, 8, "every candidate is drawn")
}

// FreePorts hands out distinct ports, outside the ephemeral range when
// there is room, free for TCP and UDP, never the same one twice.
func TestFreePorts(t *testing.T) {
	lo, hi := ephemeralRange()
	outside := portCandidates(lo, hi) != nil
	seen := map[int]bool{}
	for round := 0; round < 20; round++ {
		ports, err := FreePorts(25)
		require.NoError(t, err)
		require.Len(t, ports, 25)
		for _, p := range ports {
			assert.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
			if outside {
				assert.True(t, p < lo || p > hi, "port %d is in the ephemeral range %d-%d", p, lo, hi)
			}
		}
	}
}

// tryPort refuses a port taken for TCP or for UDP (gossip needs both).
func TestTryPortRefusesTakenPorts(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()
	cases := []struct {
		name string
		port int
	}{
		// Someone listens on it for TCP.
		{"tcp taken", tcp.Addr().(*net.TCPAddr).Port},
		// Someone has it for UDP.
		{"udp taken", udp.LocalAddr().(*net.UDPAddr).Port},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ok := tryPort(c.port)
			assert.False(t, ok)
		})
	}
	// Port 0: the kernel picks one, and it is free.
	p, ok := tryPort(0)
	assert.True(t, ok)
	assert.Positive(t, p)
}
