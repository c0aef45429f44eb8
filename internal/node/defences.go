package node

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/cluster"
)

// maxStreamsLimit is the most concurrent HTTP/2 streams a client
// connection may be granted (--max-concurrent-streams).
const maxStreamsLimit = 1000

// validateDefences refuses settings that would silently switch a defence
// off: a zero header timeout or idle timeout (net/http then waits forever),
// a zero or negative header limit or stream limit (net/http then uses its
// own defaults, which the framing guard does not know), a queue without a
// timeout, and an app that is swd's own client port (every request would
// loop through swd until the queue is full).
func (c Config) validateDefences() error {
	switch {
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("--read-header-timeout must be positive (it is the slowloris guard), got %s", c.ReadHeaderTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("--idle-timeout must be positive (idle keep-alive connections are closed after it), got %s", c.IdleTimeout)
	case c.MaxHeaderBytes <= 0:
		return fmt.Errorf("--max-header-bytes must be positive, got %d", c.MaxHeaderBytes)
	case c.MaxConcurrentStreams <= 0 || c.MaxConcurrentStreams > maxStreamsLimit:
		return fmt.Errorf("--max-concurrent-streams must be between 1 and %d, got %d", maxStreamsLimit, c.MaxConcurrentStreams)
	}
	if c.Role != cluster.RoleNode {
		return nil
	}
	if c.Queue.Timeout <= 0 {
		return fmt.Errorf("--queue-timeout must be positive (without it a request may wait forever), got %s", c.Queue.Timeout)
	}
	if c.Queue.Timeout > 24*time.Hour {
		return fmt.Errorf("--queue-timeout must be at most 24h, got %s", c.Queue.Timeout)
	}
	if pointsAtSelf(c.Proxy.App, c.Listen) {
		return fmt.Errorf("--app %s is swd's own --listen %s: every request would loop through swd; point --app at the application", c.Proxy.App, c.Listen)
	}
	return nil
}

// pointsAtSelf reports whether the app URL names the client address swd
// listens on: the same port on the same host, or on a local address when
// swd listens on every address.
func pointsAtSelf(app, listen string) bool {
	u, err := url.Parse(app)
	if err != nil {
		return false
	}
	lh, lp, err := net.SplitHostPort(listen)
	if err != nil || lp == "0" {
		return false
	}
	ah, ap := u.Hostname(), u.Port()
	if ap == "" {
		ap = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if ap != lp {
		return false
	}
	if ah == lh {
		return true
	}
	local := func(h string) bool {
		if h == "localhost" || h == "" {
			return true
		}
		ip := net.ParseIP(h)
		if ip == nil {
			return false
		}
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return false
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	return unspecified(listen) && local(ah) || local(lh) && local(ah) && (ipLoopback(lh) == ipLoopback(ah))
}

// ipLoopback reports whether host is a loopback address or localhost.
func ipLoopback(host string) bool {
	return IsLoopback(net.JoinHostPort(host, "1"))
}

// nodeKey is the key nodes authenticate each other with: from the transfer
// secret, else from the control token (which then never leaves the node:
// only MACs under the derived key do).
func (c Config) nodeKey() auth.NodeKey {
	if c.TransferSecret != "" {
		return auth.DeriveNodeKey(c.TransferSecret)
	}
	return auth.DeriveNodeKey(c.Control.Token)
}
