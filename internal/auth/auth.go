// Package auth is SWD's token authentication on the gRPC port. One shared
// token (swd --control-token) guards both services there: Control (status,
// policy switches, drain, gossip keys) and Transfer (a transfer runs a
// request on the receiving node's application, so only holders of the token
// may send one). Servers check it with the interceptors of ServerOptions;
// clients send it with Bearer, as "authorization: Bearer TOKEN" metadata.
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// header is the metadata key the token travels in.
const header = "authorization"

// guarded are the method prefixes the token guards: every Control and
// Transfer call.
var guarded = []string{
	"/" + swdv1.Control_ServiceDesc.ServiceName + "/",
	"/" + swdv1.Transfer_ServiceDesc.ServiceName + "/",
}

// ValidateToken reports whether token can be sent as metadata: a token
// with whitespace could never match what a client sends.
func ValidateToken(token string) error {
	if strings.ContainsAny(token, " \t\r\n") {
		return errors.New("token must not contain whitespace")
	}
	return nil
}

// ServerOptions returns the interceptors that refuse every guarded call
// (unary and streaming) without the token, with Unauthenticated. An empty
// token allows everything (loopback only; swd refuses it beyond).
func ServerOptions(token string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := check(ctx, token, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := check(ss.Context(), token, info.FullMethod); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}

// check lets a call through when its method is not guarded, no token is
// configured, or its metadata carries the token (compared in constant time).
func check(ctx context.Context, token, method string) error {
	guard := false
	for _, p := range guarded {
		guard = guard || strings.HasPrefix(method, p)
	}
	if token == "" || !guard {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(header) {
		got, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return nil
		}
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
