package node

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/cluster"
)

// named is DefaultConfig with a node name, on loopback ports.
func named() Config {
	c := DefaultConfig()
	c.NodeName = "node-a"
	c.Listen = "127.0.0.1:0"
	return c
}

// TestDerived: the parts' shared fields come from the daemon's own, in one
// place; a part that says otherwise is refused, never overwritten.
func TestDerived(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		mutate  func(c *Config)
		check   func(t *testing.T, d Config)
		wantErr string
	}{
		// Defaults: the name, role and logger reach every part.
		{"defaults", func(c *Config) { c.Logger = log }, func(t *testing.T, d Config) {
			for _, got := range []string{d.Proxy.NodeName, d.Dispatcher.NodeName, d.Cluster.NodeName, d.TransferServer.NodeName} {
				assert.Equal(t, "node-a", got)
			}
			assert.Equal(t, cluster.RoleNode, d.Cluster.Role)
			assert.Same(t, log, d.Proxy.Logger)
			assert.Same(t, log, d.Dispatcher.Logger)
			assert.Same(t, log, d.Cluster.Logger)
			assert.Equal(t, d.GRPCMaxMessageSize, d.Transfer.MaxMessageSize)
			assert.Equal(t, auth.NodeCreds{}, d.Transfer.Auth, "no token: no credentials")
		}, ""},
		// --max-hops 0 turns transfers off, but the server still takes the
		// one hop of a dispatcher's forward.
		{"no transfers", func(c *Config) { c.Proxy.MaxHops = 0 }, func(t *testing.T, d Config) {
			assert.Equal(t, 1, d.TransferServer.MaxHops)
		}, ""},
		// More hops allowed out means more accepted in.
		{"two hops", func(c *Config) { c.Proxy.MaxHops = 2 }, func(t *testing.T, d Config) {
			assert.Equal(t, 2, d.TransferServer.MaxHops)
		}, ""},
		// The gRPC message limit is the transfer client's too.
		{"message size", func(c *Config) { c.GRPCMaxMessageSize = 8 << 20 }, func(t *testing.T, d Config) {
			assert.Equal(t, 8<<20, d.Transfer.MaxMessageSize)
		}, ""},
		// With a token, transfers carry MACs under a key derived from it
		// (never the token itself)...
		{"token", func(c *Config) { c.Control.Token = "secret" }, func(t *testing.T, d Config) {
			assert.Equal(t, auth.NodeCreds{Key: auth.DeriveNodeKey("secret")}, d.Transfer.Auth)
		}, ""},
		// ...or from the transfer secret when there is one...
		{"transfer secret", func(c *Config) { c.Control.Token, c.TransferSecret = "secret", "cluster" }, func(t *testing.T, d Config) {
			assert.Equal(t, auth.NodeCreds{Key: auth.DeriveNodeKey("cluster")}, d.Transfer.Auth)
		}, ""},
		// ...and over TLS only over TLS.
		{"token over TLS", func(c *Config) {
			c.Control.Token = "secret"
			c.ServerCreds = insecure.NewCredentials() // stands for mTLS here
		}, func(t *testing.T, d Config) {
			assert.Equal(t, auth.NodeCreds{Key: auth.DeriveNodeKey("secret"), Secure: true}, d.Transfer.Auth)
		}, ""},
		{"other key in the client", func(c *Config) {
			c.Control.Token = "secret"
			c.Transfer.Auth = auth.NodeCreds{Key: auth.DeriveNodeKey("other")}
		}, nil, "Transfer.Auth"},
		// A part set to the same value as derived is no conflict.
		{"same name in a part", func(c *Config) { c.Proxy.NodeName = "node-a" }, nil, ""},
		// A part set to something else is refused, naming the field.
		{"other name in the proxy", func(c *Config) { c.Proxy.NodeName = "node-b" }, nil, "Proxy.NodeName"},
		{"other role in the cluster", func(c *Config) { c.Cluster.Role = cluster.RoleDispatcher }, nil, "Cluster.Role"},
		{"other hop limit in the server", func(c *Config) { c.TransferServer.MaxHops = 3 }, nil, "TransferServer.MaxHops"},
		{"other message size in the client", func(c *Config) { c.Transfer.MaxMessageSize = 1 << 20 }, nil, "Transfer.MaxMessageSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := named()
			tt.mutate(&c)
			d, err := c.Derived()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, c.Validate(), tt.wantErr)
				_, nerr := New(c)
				require.ErrorContains(t, nerr, tt.wantErr, "New refuses what Validate refuses")
				return
			}
			require.NoError(t, err)
			require.NoError(t, c.Validate())
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

// TestDerivedLeavesCallerAlone: deriving fills a copy; the caller's
// config keeps its zero fields.
func TestDerivedLeavesCallerAlone(t *testing.T) {
	c := named()
	c.Control.Token = "secret"
	_, err := c.Derived()
	require.NoError(t, err)
	assert.Empty(t, c.Proxy.NodeName)
	assert.Equal(t, auth.NodeCreds{}, c.Transfer.Auth)
}

// TestRoleValidatedWhole: each role's parts are validated, and only the
// parts the role uses.
func TestRoleValidatedWhole(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		// A node's queue, front and transfer server are checked...
		{"node: bad queue", func(c *Config) { c.Queue.Limit = 0 }, "queue limit"},
		{"node: no transfer timeout", func(c *Config) { c.Proxy.TransferTimeout = 0 }, "--transfer-timeout"},
		{"node: tiny chunks", func(c *Config) { c.TransferServer.ChunkSize = 1 }, "chunk size"},
		// ...not the dispatcher's settings it never uses.
		{"node: dispatcher settings ignored", func(c *Config) { c.Dispatcher.TransferTimeout = 0 }, ""},
		// A dispatcher's front is checked whole...
		{"dispatcher: no transfer timeout", func(c *Config) {
			c.Role = cluster.RoleDispatcher
			c.Dispatcher.TransferTimeout = 0
		}, "--transfer-timeout"},
		{"dispatcher: negative retry-after", func(c *Config) {
			c.Role = cluster.RoleDispatcher
			c.Dispatcher.RetryAfter = -5 * time.Second
		}, "--retry-after"},
		// ...and so are the queue flags that bound its FIFO (cq)...
		{"dispatcher: queue limit bounds its FIFO", func(c *Config) {
			c.Role = cluster.RoleDispatcher
			c.Queue.Limit = 0
		}, "--queue-limit"},
		{"dispatcher: queue timeout bounds its FIFO", func(c *Config) {
			c.Role = cluster.RoleDispatcher
			c.Queue.Timeout = 0
		}, "--queue-timeout"},
		// ...not the rest of a node's queue, which it does not have.
		{"dispatcher: concurrency ignored", func(c *Config) {
			c.Role = cluster.RoleDispatcher
			c.Queue.Concurrency = 0
		}, ""},
		// Both roles: the shared parts.
		{"gossip interval", func(c *Config) { c.Cluster.GossipInterval = 0 }, "gossip interval"},
		{"fan-out timeout", func(c *Config) { c.Control.FanoutTimeout = 0 }, "fan-out timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := named()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}
