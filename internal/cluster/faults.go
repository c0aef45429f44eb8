package cluster

import (
	"net"
	"sync"
)

// Faults injects network faults into a member's gossip transport, for
// partition tests in one process: datagrams to a blocked address are
// dropped (as a cut network would) and stream dials to it fail. Blocking a
// group's addresses on every member of the other group, and theirs on
// this group, cuts the cluster in two both ways.
//
// Concurrency: safe for concurrent use; the transport checks it on every
// send.
type Faults struct {
	mu      sync.RWMutex
	blocked map[string]bool // gossip "host:port" addresses
}

// NewFaults returns an injector that blocks nothing.
func NewFaults() *Faults { return &Faults{blocked: map[string]bool{}} }

// Block drops everything sent to these gossip addresses.
func (f *Faults) Block(addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range addrs {
		f.blocked[a] = true
	}
}

// Heal removes every block.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked = map[string]bool{}
}

// isBlocked reports whether sends to addr are dropped. A nil *Faults blocks
// nothing.
func (f *Faults) isBlocked(addr string) bool {
	if f == nil {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.blocked) > 0 && f.blocked[addr]
}

// errBlocked is what a blocked dial returns.
var errBlocked = &net.OpError{Op: "dial", Net: "tcp", Err: errPartitioned{}}

type errPartitioned struct{}

func (errPartitioned) Error() string   { return "partitioned by fault injection" }
func (errPartitioned) Timeout() bool   { return true }
func (errPartitioned) Temporary() bool { return true }
