package cluster

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	valid := func(mut func(*Config)) Config {
		c := DefaultConfig()
		c.NodeName = "n1"
		mut(&c)
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty means valid
	}{
		// The defaults with a name are valid.
		{"defaults", valid(func(*Config) {}), ""},
		// Port 0 binds a free port.
		{"port zero", valid(func(c *Config) { c.GossipAddr = "127.0.0.1:0" }), ""},
		// IPv6 bind addresses are fine.
		{"ipv6 bind", valid(func(c *Config) { c.GossipAddr = "[::1]:7946" }), ""},
		// Advertise may omit the port (the bound one is used).
		{"advertise without port", valid(func(c *Config) { c.Advertise = "10.0.0.1" }), ""},
		// A dispatcher is a valid role.
		{"dispatcher", valid(func(c *Config) { c.Role = RoleDispatcher }), ""},
		// The piggyback mechanism with its fanout.
		{"piggyback", valid(func(c *Config) { c.Mechanism = MechanismPiggyback; c.Fanout = 5 }), ""},
		// A 32-byte key (AES-256).
		{"key", valid(func(c *Config) { c.GossipKey = make([]byte, 32) }), ""},
		// The node name is required...
		{"no name", valid(func(c *Config) { c.NodeName = "" }), "node name is empty"},
		// ...and bounded, since it travels in every message.
		{"long name", valid(func(c *Config) { c.NodeName = strings.Repeat("x", 129) }), "more than 128"},
		// memberlist binds to IPs, not host names.
		{"bind host name", valid(func(c *Config) { c.GossipAddr = "localhost:7946" }), "not an IP address"},
		// The bind address needs a port.
		{"bind without port", valid(func(c *Config) { c.GossipAddr = "127.0.0.1" }), "gossip address"},
		// Ports are 16-bit.
		{"bad port", valid(func(c *Config) { c.GossipAddr = "127.0.0.1:70000" }), "0..65535"},
		// A bad advertise address.
		{"bad advertise", valid(func(c *Config) { c.Advertise = "example.com:1" }), "advertise address"},
		// Join entries may not be blank.
		{"blank join", valid(func(c *Config) { c.Join = []string{"127.0.0.1:1", " "} }), "join address 1 is empty"},
		// The interval must be positive.
		{"zero interval", valid(func(c *Config) { c.GossipInterval = 0 }), "gossip interval"},
		// Stale-after may not be negative...
		{"negative stale", valid(func(c *Config) { c.StaleAfter = -time.Second }), "negative"},
		// ...nor shorter than one interval (every entry would be stale).
		{"stale below interval", valid(func(c *Config) { c.StaleAfter = time.Millisecond }), "shorter than the gossip interval"},
		// AES keys are 16, 24 or 32 bytes.
		{"bad key", valid(func(c *Config) { c.GossipKey = make([]byte, 10) }), "want 16, 24 or 32"},
		// Unknown roles are refused.
		{"bad role", valid(func(c *Config) { c.Role = "leader" }), "role"},
		// An empty role is not silently a node.
		{"empty role", valid(func(c *Config) { c.Role = "" }), "role"},
		// Unknown mechanisms are refused.
		{"bad mechanism", valid(func(c *Config) { c.Mechanism = "carrier-pigeon" }), "mechanism"},
		// Fanout may not be negative.
		{"negative fanout", valid(func(c *Config) { c.Fanout = -1 }), "fanout"},
		// The gRPC address must fit in node meta.
		{"long grpc", valid(func(c *Config) { c.GRPCAddr = strings.Repeat("a", 300) }), "grpc address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Equal(t, strings.ToLower(err.Error()[:1]), err.Error()[:1], "errors start lowercase")
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c := DefaultConfig()
	assert.Equal(t, "127.0.0.1:7946", c.GossipAddr)
	assert.Equal(t, 20*time.Millisecond, c.GossipInterval)
	assert.Equal(t, RoleNode, c.Role)
	assert.Equal(t, 100*time.Millisecond, c.staleAfter(), "0 means 5 intervals")
	c.StaleAfter = 70 * time.Millisecond
	assert.Equal(t, 70*time.Millisecond, c.staleAfter())

	// New refuses an invalid config and a node without local state.
	_, err := New(Config{}, newLocal(0))
	require.ErrorContains(t, err, "node name is empty")
	c = testConfig("n")
	_, err = New(c, nil)
	require.ErrorContains(t, err, "local state is nil")
}

func TestParseGossipKey(t *testing.T) {
	key16 := []byte("0123456789abcdef")
	tests := []struct {
		name    string
		in      string
		want    []byte
		wantErr string
	}{
		// Empty: no encryption.
		{"empty", "", nil, ""},
		// Padded standard base64 of 16 bytes.
		{"padded", base64.StdEncoding.EncodeToString(key16), key16, ""},
		// Unpadded works too; surrounding space is ignored.
		{"raw", " " + base64.RawStdEncoding.EncodeToString(key16) + "\n", key16, ""},
		// Not base64.
		{"garbage", "not*base64", nil, "not base64"},
		// Base64 of a wrong-sized key.
		{"short", base64.StdEncoding.EncodeToString([]byte("short")), nil, "want 16, 24 or 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGossipKey(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
