package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Nodes authenticate their calls to each other (transfers, and the
// cluster-wide fan-out of Control calls) with a node key, never with the
// control token: the token never leaves the node. Each call carries
//
//	swd-node-auth: v1 <unix milliseconds> <hex HMAC-SHA256>
//
// the MAC, under the node key, of the time, the :authority the caller
// dialled (the receiver's gRPC address) and the full method. A receiver
// accepts it within NodeMACWindow of its own clock and only for its own
// addresses, so a MAC a member received cannot be used against any other
// node, nor after the window; what a MAC reveals does not give the key.
// The node key is derived from --transfer-secret or, when that is not set,
// from the control token (see DeriveNodeKey).

// nodeHeader is the metadata key the node MAC travels in.
const nodeHeader = "swd-node-auth"

// NodeMACWindow is how far a node MAC's time may be from the receiver's
// clock.
const NodeMACWindow = 30 * time.Second

// NodeKey is the key nodes authenticate each other with. The zero NodeKey
// means no node authentication. It never prints its key.
type NodeKey struct{ key string }

// DeriveNodeKey returns the node key for a cluster secret (the transfer
// secret, or else the control token); "" gives the zero key.
func DeriveNodeKey(secret string) NodeKey {
	if secret == "" {
		return NodeKey{}
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("swd node key v1"))
	return NodeKey{key: string(m.Sum(nil))}
}

// IsZero reports whether k is the zero key.
func (k NodeKey) IsZero() bool { return k.key == "" }

// String never shows the key.
func (k NodeKey) String() string {
	if k.IsZero() {
		return "no node key"
	}
	return "a node key"
}

// GoString never shows the key either (%#v).
func (k NodeKey) GoString() string { return "auth.NodeKey{" + k.String() + "}" }

func (k NodeKey) mac(ms int64, authority, method string) []byte {
	m := hmac.New(sha256.New, []byte(k.key))
	m.Write([]byte("v1\n" + strconv.FormatInt(ms, 10) + "\n" + authority + "\n" + method))
	return m.Sum(nil)
}

// normAuthority makes the authority a client was given (its audience
// URI's host, from which grpc-go trims ":443") and the one a server
// receives compare equal.
func normAuthority(a string) string { return strings.TrimSuffix(a, ":443") }

// NodeCreds sends a node MAC with every call of a client connection
// (grpc.WithPerRPCCredentials). The zero NodeCreds sends nothing.
type NodeCreds struct {
	Key NodeKey
	// Secure refuses to send over a connection without transport security
	// (set when the connection uses TLS).
	Secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c NodeCreds) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	if c.Key.IsZero() {
		return nil, nil
	}
	ri, ok := credentials.RequestInfoFromContext(ctx)
	if !ok || len(uri) == 0 {
		return nil, errors.New("node credentials: no request information")
	}
	u, err := url.Parse(uri[0])
	if err != nil {
		return nil, errors.New("node credentials: bad audience " + uri[0])
	}
	ms := time.Now().UnixMilli()
	return map[string]string{nodeHeader: "v1 " + strconv.FormatInt(ms, 10) + " " + hex.EncodeToString(c.Key.mac(ms, normAuthority(u.Host), ri.Method))}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c NodeCreds) RequireTransportSecurity() bool { return c.Secure }

// DialOption is the option that sends c with every call; for the zero
// NodeCreds it is an option that does nothing.
func (c NodeCreds) DialOption() grpc.DialOption {
	if c.Key.IsZero() {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(c)
}

// String never shows the key.
func (c NodeCreds) String() string { return "node credentials with " + c.Key.String() }

// validNodeMAC reports whether the incoming call carries a node MAC under
// key, for one of authorities (any, when the list is empty) and method,
// within NodeMACWindow of now.
func validNodeMAC(md metadata.MD, key NodeKey, authorities []string, method string, now time.Time) bool {
	auths := md.Get(":authority")
	if len(auths) != 1 {
		return false
	}
	authority := normAuthority(auths[0])
	if len(authorities) > 0 && !slices.ContainsFunc(authorities, func(a string) bool { return normAuthority(a) == authority }) {
		return false
	}
	for _, v := range md.Get(nodeHeader) {
		f := strings.Fields(v)
		if len(f) != 3 || f[0] != "v1" {
			continue
		}
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		if d := now.Sub(time.UnixMilli(ms)); d > NodeMACWindow || d < -NodeMACWindow {
			continue
		}
		got, err := hex.DecodeString(f[2])
		if err == nil && hmac.Equal(got, key.mac(ms, authority, method)) {
			return true
		}
	}
	return false
}
