// Package peers runs the load balancers users deploy instead of SWD —
// HAProxy, nginx and Caddy — so that loadgen can measure them beside SWD's
// policies on the same apps with the same requests.
//
// A Peer is one named system (haproxy-cq, haproxy-leastconn, haproxy-hash,
// nginx-leastconn, caddy-leastconn): a Product (the program, its Debian
// package, how to run and check it) and the Settings that make the system
// (the balancing algorithm; whether the balancer sends each server at most
// m requests and queues the rest itself, a central queue). Its
// configuration is rendered from a text/template kept in templates/ next
// to this code; Check runs the product's own validator on it (haproxy -c,
// nginx -t, caddy validate).
//
// Start runs a peer as a child process of the caller, never as a system
// service: it listens on a loopback port, keeps its configuration, pid
// file, temporary files and log in its own directory, and Stop ends it.
// Children are started with the parent-death signal through
// internal/childproc, so a peer never outlives the process that started it. A product that is not installed gives ErrNotInstalled, whose message
// names the script that installs it (scripts/ensure-<product>.sh); callers
// skip that peer with the message, never fake it.
//
// Adding a system is adding a Peer to the registry: haproxy-hash, the
// reference for key affinity (docs/affinity.md), is Settings{Balance:
// "hdr(X-User)", BackendLines: []string{"hash-type consistent",
// "hash-balance-factor 125"}}.
//
// Concurrency: the registry is read-only after package initialisation;
// Render, Check and Start may be called concurrently. A Process's methods
// are safe for concurrent use.
package peers
