// Package auth is SWD's authentication on the gRPC port. Operators send
// the control token (swd --control-token) with Control calls (status,
// policy switches, drain, gossip keys), with Bearer, as "authorization:
// Bearer TOKEN" metadata. Nodes never send the token to each other: their
// calls (transfers, which run a request on the receiver's application, and
// the fan-out of cluster-wide Control calls) carry a node MAC under a key
// derived from the cluster's transfer secret or token (NodeCreds, see
// node.go). Servers check both with the interceptors of ServerOptions.
// mTLS and the transfer server's membership check guard transfers further.
//
// Concurrency: everything here is immutable once built and safe for
// concurrent use.
package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// header is the metadata key the token travels in.
const header = "authorization"

// The guarded services: every Control and Transfer call.
var (
	controlPrefix  = "/" + swdv1.Control_ServiceDesc.ServiceName + "/"
	transferPrefix = "/" + swdv1.Transfer_ServiceDesc.ServiceName + "/"
)

// ValidateToken reports whether token can be sent as metadata: a token
// with whitespace could never match what a client sends.
func ValidateToken(token string) error {
	if strings.ContainsAny(token, " \t\r\n") {
		return errors.New("token must not contain whitespace")
	}
	return nil
}

// ServerAuth is what a gRPC server checks.
type ServerAuth struct {
	// Token is the control token operators send (Control calls).
	Token string
	// NodeKey authenticates other nodes (Transfer and Control calls; see
	// NodeCreds). With a node key, Transfer calls need a node MAC; without
	// one, the token guards them as it guards Control.
	NodeKey NodeKey
	// Authorities are this server's own addresses (host:port), the only
	// :authority a node MAC is accepted for; empty accepts any.
	Authorities []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ServerOptions returns the interceptors that refuse every guarded call
// (unary and streaming) that is not authenticated, with Unauthenticated:
// a Control call needs the token or a node MAC, a Transfer call a node MAC
// (or the token when there is no node key). With neither a token nor a
// node key everything is allowed (loopback only; swd refuses it beyond).
func ServerOptions(a ServerAuth) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := a.check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := a.check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}

// check lets a call through when its method is not guarded, nothing is
// configured, or the call is authenticated as described at ServerOptions.
func (a ServerAuth) check(ctx context.Context, method string) error {
	control, transfer := strings.HasPrefix(method, controlPrefix), strings.HasPrefix(method, transferPrefix)
	if (!control && !transfer) || (a.Token == "" && a.NodeKey.IsZero()) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if !a.NodeKey.IsZero() && validNodeMAC(md, a.NodeKey, a.Authorities, method, now()) {
		return nil
	}
	if a.Token != "" && (control || a.NodeKey.IsZero()) {
		for _, v := range md.Get(header) {
			got, ok := strings.CutPrefix(v, "Bearer ")
			if ok && subtle.ConstantTimeCompare([]byte(got), []byte(a.Token)) == 1 {
				return nil
			}
		}
	}
	if transfer {
		return status.Error(codes.Unauthenticated, "transfer not authenticated: nodes need the same --transfer-secret (or control token)")
	}
	return status.Error(codes.Unauthenticated, "missing or wrong control token: pass --token or set SWD_CONTROL_TOKEN")
}

// Bearer sends a token with every call of a client connection
// (grpc.WithPerRPCCredentials). The zero Bearer sends nothing.
type Bearer struct {
	Token string
	// Secure refuses to send the token over a connection without
	// transport security (set when the connection uses TLS).
	Secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if b.Token == "" {
		return nil, nil
	}
	return map[string]string{header: "Bearer " + b.Token}, nil
}

// String never shows the token (configs and errors may print a Bearer).
func (b Bearer) String() string {
	if b.Token == "" {
		return "no token"
	}
	return "a token"
}

// GoString never shows the token either (%#v).
func (b Bearer) GoString() string { return "auth.Bearer{" + b.String() + "}" }

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b Bearer) RequireTransportSecurity() bool { return b.Secure }

// DialOption is the option that sends b with every call; for the zero
// Bearer (no token) it is an option that does nothing.
func (b Bearer) DialOption() grpc.DialOption {
	if b.Token == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(b)
}

// OutgoingContext returns ctx carrying token for one call, for calls on a
// connection made without Bearer. An empty token leaves ctx as it is.
func OutgoingContext(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, header, "Bearer "+token)
}
