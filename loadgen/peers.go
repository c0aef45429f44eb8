package loadgen

import (
	"context"
	"errors"
	"fmt"

	"github.com/swd-project/swd/internal/peers"
)

// PeerLauncher starts the balancers of internal/peers (haproxy-cq,
// nginx-leastconn, ...) in front of a cluster's apps, for a Sweep.
//
// Safe for concurrent use: it holds only configuration.
type PeerLauncher struct {
	// Apps are the apps' host:port addresses (a local cluster's
	// LocalNode.App).
	Apps []string
	// Concurrency is m: a peer with a central queue sends each app at most
	// that many requests at once.
	Concurrency int
	// ReadyPath is requested through a started peer until it answers 2xx
	// before its runs begin ("/healthz": dummyapp's); empty waits only for
	// its port to accept connections.
	ReadyPath string
}

// StartPeer implements PeerStarter: the peer runs as a child process on a
// free loopback port until stop is called.
func (l PeerLauncher) StartPeer(ctx context.Context, name string) (string, func() error, error) {
	p, err := peers.Lookup(name)
	if err != nil {
		return "", nil, err
	}
	cfg := peers.DefaultConfig()
	cfg.Backends, cfg.Concurrency, cfg.ReadyPath = l.Apps, l.Concurrency, l.ReadyPath
	pr, err := peers.Start(ctx, p, cfg)
	if err != nil {
		return "", nil, err
	}
	return pr.Addr, pr.Stop, nil
}

// CheckPeers splits names into the peers installed on this machine and a
// message for each one that is not (the program is missing: the message
// says how to install it). An unknown name is an error.
func CheckPeers(names []string) (installed []string, skipped []string, err error) {
	for _, n := range names {
		p, err := peers.Lookup(n)
		if err != nil {
			return nil, nil, err
		}
		if _, err := peers.Find(p.Product); err != nil {
			if errors.Is(err, peers.ErrNotInstalled) {
				skipped = append(skipped, fmt.Sprintf("skipping %s: %v", n, err))
				continue
			}
			return nil, nil, err
		}
		installed = append(installed, n)
	}
	return installed, skipped, nil
}

// HashPeerHeader is the header the haproxy-hash peer hashes: a keyed
// workload must send its keys there for that peer to keep them on one app.
const HashPeerHeader = peers.HashHeader

// PeerNames lists the peers a sweep can measure.
func PeerNames() []string { return peers.Names() }
