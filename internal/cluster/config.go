package cluster

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Roles a member can have.
const (
	// RoleNode is a serving node: it is on the ring and gossips its load.
	RoleNode = "node"
	// RoleDispatcher is a front door for dispatch policies: a member (its
	// GRPCAddr is needed) that is not on the ring and gossips no load.
	RoleDispatcher = "dispatcher"
)

// Load dissemination mechanisms (see the package comment and docs/gossip.md).
const (
	// MechanismDirect sends the node's own entry to every other member with
	// memberlist.SendBestEffort every GossipInterval: n-1 small datagrams per
	// tick per node. The default.
	MechanismDirect = "direct"
	// MechanismPiggyback hands memberlist a message holding the node's own
	// entry and the fresh entries it has heard of (with their ages) through
	// Delegate.GetBroadcasts; memberlist sends it to Fanout random members
	// every GossipInterval and piggybacks it on probes. Fewer, larger
	// datagrams; entries reach most nodes through a relay.
	MechanismPiggyback = "piggyback"
)

// Limits of the wire format; Validate enforces them.
const (
	maxNameLen   = 128
	maxPolicyLen = 64
	maxGRPCLen   = 256
)

// Memberlist tuning for a LAN or a loopback cluster. memberlist's
// DefaultLANConfig targets failure detection in tens of seconds; SWD wants a
// SIGKILLed node out of the membership within 5 s on loopback at 64 nodes.
//
// Time to declare a silent node dead = time until some member probes it
// (≤ probeInterval) + the failed direct and indirect probes (≤ probeInterval)
// + the suspicion timeout, which starts at suspicionMaxTimeoutMult × min and
// shrinks towards min as other members confirm the suspicion, with
// min = suspicionMult × max(1, log10 n) × probeInterval:
//
//	n = 16: min 0.72 s, max 2.17 s → dead within ≈ 2.6 s
//	n = 64: min 1.08 s, max 3.25 s → dead within ≈ 3.7 s
//
// A falsely suspected member (a slow, loaded machine) refutes the suspicion
// within that time, so a short probeTimeout costs little.
const (
	probeInterval           = 200 * time.Millisecond
	probeTimeout            = 100 * time.Millisecond
	suspicionMult           = 3
	suspicionMaxTimeoutMult = 3
	awarenessMaxMultiplier  = 4 // Lifeguard: a loaded node stretches its probes at most 4×
	indirectChecks          = 3
	retransmitMult          = 4 // memberlist's LAN default: a join reaches everyone by gossip
	// membershipGossipInterval is memberlist's own gossip period (membership
	// changes) under MechanismDirect; under MechanismPiggyback memberlist
	// gossips every GossipInterval instead.
	membershipGossipInterval = 50 * time.Millisecond
	membershipGossipNodes    = 3
	// pushPullInterval: a full state sync over TCP with one random member.
	// Gossip can, rarely, run out of retransmissions before a join reaches
	// every member (seen in tests: one of five never heard of another);
	// push-pull repairs that. memberlist stretches the interval past 32
	// members (×2 at 64); one exchange of ≈ 100 bytes per member every
	// few seconds costs nothing measurable.
	pushPullInterval    = 3 * time.Second
	tcpTimeout          = 2 * time.Second
	gossipToTheDeadTime = 5 * time.Second
	// deadNodeReclaimTime lets a node restarted under the same name but at a
	// different address take its name back once the old one has been dead
	// this long. (Same name, same address needs nothing: the new process
	// refutes the "dead" it learns about itself with a higher incarnation.)
	deadNodeReclaimTime = 2 * time.Second
	// udpBufferSize is memberlist's datagram budget: safe on a 1500-byte
	// MTU, so piggybacked tables never fragment.
	udpBufferSize = 1400
)

// Join retry back-off.
const (
	joinBackoffMin = 50 * time.Millisecond
	joinBackoffMax = 5 * time.Second
)

// Config configures one member. Use DefaultConfig and override fields; New
// validates it.
type Config struct {
	// NodeName is the member's unique name in the cluster (--node-name,
	// default the host name). Ring IDs follow the names' byte order.
	NodeName string
	// GossipAddr is the memberlist bind address, host:port with an IP host
	// (--gossip, default 127.0.0.1:7946). Port 0 binds a free port; read it
	// back with Cluster.GossipAddr.
	GossipAddr string
	// Advertise is the host:port other members reach this one at, when it
	// differs from GossipAddr (NAT, 0.0.0.0 bind). Optional (--advertise);
	// port 0 or no port means the bound port.
	Advertise string
	// Join lists seed members, host:port or DNS names (--join). The member
	// retries with back-off (50 ms doubling to 5 s) in the background until
	// it sees another member; with no seeds it is a one-node cluster.
	Join []string
	// GossipInterval is how often load is disseminated (--gossip-interval,
	// default 20 ms).
	GossipInterval time.Duration
	// StaleAfter is the age past which a peer's entry counts as unknown to
	// the policies (--stale-after). 0 means 5 × GossipInterval.
	StaleAfter time.Duration
	// GossipKey, if set, is an AES key of 16, 24 or 32 bytes that encrypts
	// and authenticates all gossip (memberlist's keyring); every member needs
	// the same key. See ParseGossipKey for the base64 flag form.
	GossipKey []byte
	// GRPCAddr is the member's transfer/control gRPC address, advertised to
	// the others in memberlist node meta.
	GRPCAddr string
	// Role is RoleNode ("node") or RoleDispatcher ("dispatcher").
	Role string
	// Mechanism selects load dissemination: MechanismDirect (default, "")
	// or MechanismPiggyback.
	Mechanism string
	// Fanout is how many random members receive each piggybacked message
	// (MechanismPiggyback only); 0 means 3.
	Fanout int
	// Logger receives the cluster's logs; memberlist's own lines go to it
	// at debug level. nil discards.
	Logger *slog.Logger
	// Faults, if set, injects network faults into the gossip transport
	// (partition tests). Production leaves it nil.
	Faults *Faults
}

// DefaultConfig returns the documented defaults: the host name as node name,
// 127.0.0.1:7946, a 20 ms gossip interval, role "node", direct mechanism.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		NodeName:       host,
		GossipAddr:     "127.0.0.1:7946",
		GossipInterval: 20 * time.Millisecond,
		Role:           RoleNode,
		Mechanism:      MechanismDirect,
		Fanout:         3,
	}
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("cluster: node name is empty")
	case len(c.NodeName) > maxNameLen:
		return fmt.Errorf("cluster: node name is %d bytes, more than %d", len(c.NodeName), maxNameLen)
	}
	if _, _, err := splitAddr(c.GossipAddr, false); err != nil {
		return fmt.Errorf("cluster: gossip address: %w", err)
	}
	if c.Advertise != "" {
		if _, _, err := splitAddr(c.Advertise, true); err != nil {
			return fmt.Errorf("cluster: advertise address: %w", err)
		}
	}
	for i, j := range c.Join {
		if strings.TrimSpace(j) == "" {
			return fmt.Errorf("cluster: join address %d is empty", i)
		}
	}
	switch {
	case c.GossipInterval <= 0:
		return fmt.Errorf("cluster: gossip interval %v is not positive", c.GossipInterval)
	case c.StaleAfter < 0:
		return fmt.Errorf("cluster: stale-after %v is negative", c.StaleAfter)
	case c.StaleAfter > 0 && c.StaleAfter < c.GossipInterval:
		return fmt.Errorf("cluster: stale-after %v is shorter than the gossip interval %v", c.StaleAfter, c.GossipInterval)
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		return fmt.Errorf("cluster: gossip key is %d bytes, want 16, 24 or 32", len(c.GossipKey))
	}
	if len(c.GRPCAddr) > maxGRPCLen {
		return fmt.Errorf("cluster: grpc address is %d bytes, more than %d", len(c.GRPCAddr), maxGRPCLen)
	}
	switch c.Role {
	case RoleNode, RoleDispatcher:
	default:
		return fmt.Errorf("cluster: role %q is neither %q nor %q", c.Role, RoleNode, RoleDispatcher)
	}
	switch c.Mechanism {
	case "", MechanismDirect, MechanismPiggyback:
	default:
		return fmt.Errorf("cluster: mechanism %q is neither %q nor %q", c.Mechanism, MechanismDirect, MechanismPiggyback)
	}
	if c.Fanout < 0 {
		return fmt.Errorf("cluster: fanout %d is negative", c.Fanout)
	}
	return nil
}

// staleAfter returns the effective stale-after.
func (c Config) staleAfter() time.Duration {
	if c.StaleAfter > 0 {
		return c.StaleAfter
	}
	return 5 * c.GossipInterval
}

func (c Config) mechanism() string {
	if c.Mechanism == "" {
		return MechanismDirect
	}
	return c.Mechanism
}

func (c Config) fanout() int {
	if c.Fanout > 0 {
		return c.Fanout
	}
	return 3
}

// ParseGossipKey decodes a gossip key as users give it (swd --gossip-key,
// swdctl gossip-key): standard base64 (padded or not, surrounding space
// ignored) of a 16-, 24- or 32-byte AES key. The empty string means no key.
// It is the one decoder of gossip keys.
func ParseGossipKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("gossip key is %d bytes, want 16, 24 or 32", len(key))
	}
	return key, nil
}

// splitAddr parses host:port with an IP host. With portOptional, a bare IP
// is accepted (port 0).
func splitAddr(addr string, portOptional bool) (net.IP, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		if !portOptional {
			return nil, 0, fmt.Errorf("%q: %w", addr, err)
		}
		host, portStr = strings.Trim(addr, "[]"), "0"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, 0, fmt.Errorf("%q: host %q is not an IP address", addr, host)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, 0, fmt.Errorf("%q: port %q is not a number in 0..65535", addr, portStr)
	}
	return ip, port, nil
}

// memberlistConfig builds memberlist's configuration from ours (validated)
// and the delegates.
func (c Config) memberlistConfig(logger *slog.Logger) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	bindIP, bindPort, _ := splitAddr(c.GossipAddr, false)
	mc.BindAddr, mc.BindPort = bindIP.String(), bindPort
	mc.AdvertiseAddr, mc.AdvertisePort = "", 0
	if c.Advertise != "" {
		ip, port, _ := splitAddr(c.Advertise, true)
		mc.AdvertiseAddr, mc.AdvertisePort = ip.String(), port
	}
	mc.TCPTimeout = tcpTimeout
	mc.IndirectChecks = indirectChecks
	mc.RetransmitMult = retransmitMult
	mc.SuspicionMult = suspicionMult
	mc.SuspicionMaxTimeoutMult = suspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = awarenessMaxMultiplier
	mc.PushPullInterval = pushPullInterval
	mc.ProbeInterval = probeInterval
	mc.ProbeTimeout = probeTimeout
	mc.GossipInterval = membershipGossipInterval
	mc.GossipNodes = membershipGossipNodes
	if c.mechanism() == MechanismPiggyback {
		mc.GossipInterval = c.GossipInterval
		mc.GossipNodes = c.fanout()
	}
	mc.GossipToTheDeadTime = gossipToTheDeadTime
	mc.DeadNodeReclaimTime = deadNodeReclaimTime
	mc.UDPBufferSize = udpBufferSize
	// Compression costs CPU on every 40-byte datagram and rarely shrinks it.
	mc.EnableCompression = false
	mc.DNSConfigPath = "/etc/resolv.conf"
	if len(c.GossipKey) > 0 {
		kr, err := memberlist.NewKeyring(nil, c.GossipKey)
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip key: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.LogOutput = nil
	mc.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return mc, nil
}
