// Package cluster makes SWD nodes a cluster: membership with
// hashicorp/memberlist, a ring of absolute node IDs every node agrees on,
// and a fresh view of every node's load, which the transfer policies read.
//
// # Membership
//
// New binds the gossip address, starts memberlist and returns; seeds given in
// Config.Join (addresses or DNS names) are contacted in the background and
// retried with exponential back-off (50 ms to 5 s) until another member is
// seen. A node with no reachable seed is a one-node cluster, not an error.
// Every member advertises its role and gRPC address in memberlist's node
// meta; members whose meta is not SWD's are refused. Leave announces a
// graceful departure (the others drop the member at once); Shutdown without
// Leave looks like a crash. memberlist is tuned for a LAN or loopback (see
// the constants in config.go): by those constants a silent member is
// declared dead within about 2.6 s at 16 nodes and 3.7 s at 64, within the
// 5 s goal (measured times: docs/gossip.md). A member restarted under the same name rejoins: at the same
// address by refuting its old incarnation, at another address once the old
// one has been dead for 2 s.
//
// # Ring
//
// The ring is the alive members with role "node", sorted by name (byte
// order); a node's ring ID is its index, 0..n-1. Dispatchers are members but
// not on the ring. Since the ring is a pure function of the membership,
// members that see the same membership compute the same ring. When a member
// joins, every node whose name sorts after it moves up by one; when one
// leaves or is declared dead, those after it move down by one; the others
// keep their IDs. Relative IDs in the N policy therefore change only for
// pairs that straddle the change. Membership spreads by gossip, so for a
// few hundred milliseconds after a change two members may disagree; moves
// must name their target by Name (View.Nodes[i].Name), never by ID alone.
//
// # Load gossip
//
// Every GossipInterval (20 ms) each node sends its entry, a 33-byte
// versioned binary message (wire.go: magic, version, node name, boot ID,
// sequence number, load, m, policy name, epoch and activation interval), to
// every other member (MechanismDirect). A receiver keeps, per member, the
// newest entry: higher sequence number within a boot ID, or a newer boot ID
// (a restarted process). Ages are measured from local receipt, so clocks of
// different machines are never compared. Entries older than StaleAfter
// (5 intervals) have Known false, so a crashed node stops counting for load
// 100 ms after its last message, long before memberlist declares it dead.
// Malformed and foreign messages are counted in Stats and dropped, and a
// message is validated whole before any of it reaches the view.
//
// The mechanism was chosen by measurement; the figures, and the command
// that reproduces them (make bench-gossip, test/bench/gossip), are in
// docs/gossip.md. In short: direct sending keeps peers' entries about one
// interval old, and its cost per node grows linearly with n (n-1 datagrams
// per tick). memberlist's piggyback path (MechanismPiggyback: the own entry
// plus relayed fresh entries handed to memberlist's gossip) costs less at
// large n, but most entries arrive through a relay, several intervals old.
// Direct is therefore the default; docs/gossip.md sketches how to bound its
// cost on large clusters.
//
// Direct sending is cheap because this package brings its own memberlist
// transport (transport.go): memberlist's NetTransport allocates 64 KiB per
// datagram read, which at 20 ms gossip cost more CPU than everything else;
// ours reuses one read buffer, sends a tick's datagrams in one sendmmsg(2),
// and hands unencrypted load messages to the cluster without memberlist's
// two goroutine hand-offs. With a GossipKey, every datagram goes through
// memberlist's AES-GCM path instead, at a higher cost.
//
// # Concurrency
//
// Every exported method of Cluster is safe for concurrent use. View, Peers,
// Peer, Ring, IsMember and Members read an immutable ring snapshot (an
// atomic.Pointer swapped when the membership changes) and per-member slots
// holding an atomic.Pointer to the latest entry; they never block on the
// network or on each other, and return values the caller owns. The receive
// path is O(1) per entry and lock-free: one snapshot load, one map lookup,
// one compare-and-swap. Membership events (rare) take a mutex, rebuild the
// ring and publish it. LocalState methods are called from the gossip
// goroutine and from View and Peers callers, concurrently: they must be
// lock-free and cheap. The OnPolicy callback runs on a receive goroutine:
// it must return quickly and must not call Leave or Shutdown (Shutdown
// waits for that goroutine). When Shutdown returns, this package's goroutines
// and the transport's are gone. memberlist's own goroutines exit moments
// later, and the tests check that none outlive a shutdown.
package cluster
