package auth

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// serve runs a gRPC server on 127.0.0.1 with the token interceptors, an
// unimplemented Control and Transfer service (a call that passes the check
// answers Unimplemented) and the standard health service (not guarded).
func serve(t *testing.T, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(ServerOptions(ServerAuth{Token: token})...)
	swdv1.RegisterControlServer(s, swdv1.UnimplementedControlServer{})
	swdv1.RegisterTransferServer(s, swdv1.UnimplementedTransferServer{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, b Bearer) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), b.DialOption())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestServerOptions: which calls the token lets through, on real sockets.
func TestServerOptions(t *testing.T) {
	tests := []struct {
		name   string
		server string // the configured token
		client Bearer // what the connection sends
		perCtx string // a token added to one call's context instead
		want   codes.Code
	}{
		// The right token passes the check (the stub then answers Unimplemented).
		{"right token", "s3cret", Bearer{Token: "s3cret"}, "", codes.Unimplemented},
		// Added to one call's context, it passes too.
		{"token in the context", "s3cret", Bearer{}, "s3cret", codes.Unimplemented},
		// No token, or another one: refused.
		{"no token", "s3cret", Bearer{}, "", codes.Unauthenticated},
		{"wrong token", "s3cret", Bearer{Token: "guess"}, "", codes.Unauthenticated},
		{"prefix of the token", "s3cret", Bearer{Token: "s3cre"}, "", codes.Unauthenticated},
		// No token configured (loopback only): everything passes.
		{"open server", "", Bearer{}, "", codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := dial(t, serve(t, tt.server), tt.client)
			ctx, cancel := context.WithTimeout(OutgoingContext(context.Background(), tt.perCtx), 10*time.Second)
			defer cancel()
			// A unary Control call and a streaming Transfer call are guarded alike.
			_, err := swdv1.NewControlClient(cc).Status(ctx, &swdv1.StatusRequest{})
			assert.Equal(t, tt.want, status.Code(err), "Control.Status: %v", err)
			stream, err := swdv1.NewTransferClient(cc).Forward(ctx, &swdv1.ForwardRequest{})
			if err == nil {
				_, err = stream.Recv()
			}
			assert.Equal(t, tt.want, status.Code(err), "Transfer.Forward: %v", err)
		})
	}
}

// TestUnguardedServices: services other than Control and Transfer (here
// the health check) need no token.
func TestUnguardedServices(t *testing.T) {
	cc := dial(t, serve(t, "s3cret"), Bearer{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	assert.NoError(t, err)
}

// TestBearer: the credential sends exactly "Bearer TOKEN", nothing for no
// token, and never prints the token.
func TestBearer(t *testing.T) {
	md, err := Bearer{Token: "s3cret"}.GetRequestMetadata(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"authorization": "Bearer s3cret"}, md)
	md, err = Bearer{}.GetRequestMetadata(context.Background())
	require.NoError(t, err)
	assert.Empty(t, md)
	assert.True(t, Bearer{Token: "x", Secure: true}.RequireTransportSecurity())
	for _, b := range []Bearer{{Token: "s3cret"}, {Token: "s3cret", Secure: true}} {
		assert.NotContains(t, fmt.Sprint(b), "s3cret")
		assert.NotContains(t, fmt.Sprintf("%+v %#v", b, []Bearer{b}), "s3cret")
	}
}

func TestValidateToken(t *testing.T) {
	tests := []struct {
		token string
		ok    bool
	}{
		// Any printable token without whitespace is fine; so is none.
		{"s3cret-token_1", true},
		{"", true},
		// Whitespace could never match what a client sends.
		{"two words", false},
		{"trailing\n", false},
		{"tab\t", false},
	}
	for _, tt := range tests {
		if tt.ok {
			assert.NoError(t, ValidateToken(tt.token), "%q", tt.token)
		} else {
			assert.Error(t, ValidateToken(tt.token), "%q", tt.token)
		}
	}
}
