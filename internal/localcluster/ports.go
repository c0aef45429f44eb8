package localcluster

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports that FreePorts handed out in this process: it never hands one out
// twice, so two clusters in one process (parallel tests) never share one,
// even while a node of the first is down for a restart. At most the size of
// the candidate range.
var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// pickPort returns a port drawn uniformly from ranges, or 0 (the kernel
// picks) when there are none.
func pickPort(ranges [][2]int) int {
	size := 0
	for _, r := range ranges {
		size += r[1] - r[0] + 1
	}
	if size == 0 {
		return 0
	}
	i := rand.IntN(size)
	for _, r := range ranges {
		if i <= r[1]-r[0] {
			return r[0] + i
		}
		i -= r[1] - r[0] + 1
	}
	return 0
}

// tryPort reports whether port (0: one the kernel picks) is free on
// 127.0.0.1 for both TCP and UDP, and which port it checked.
func tryPort(port int) (int, bool) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return 0, false
	}
	port = l.Addr().(*net.TCPAddr).Port
	u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
	_ = l.Close()
	if err != nil {
		return 0, false
	}
	_ = u.Close()
	return port, true
}

// ephemeralRange is the kernel's range of local ports for bind(":0") and
// outgoing connections: Linux's ip_local_port_range, else IANA's dynamic
// range (the BSDs' and macOS's default).
func ephemeralRange() (lo, hi int) {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				return l, h
			}
		}
	}
	return 49152, 65535
}

// portCandidates are the inclusive ranges FreePorts picks from: 10000-65535
// (above most registered service ports) without the ephemeral range lo-hi.
// None (the kernel then picks, from the ephemeral range) when that leaves
// fewer than 1000 ports.
func portCandidates(lo, hi int) [][2]int {
	var out [][2]int
	size := 0
	add := func(a, b int) {
		if a <= b {
			out = append(out, [2]int{a, b})
			size += b - a + 1
		}
	}
	add(10000, min(lo-1, 65535))
	add(max(hi+1, 10000), 65535)
	if size < 1000 {
		return nil
	}
	return out
}
