package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad flags, environment variables and config files are refused before
// anything starts, with a message naming the setting.
func TestBadConfigurationIsRefused(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	require.NoError(t, os.WriteFile(unknown, []byte("queue-limt: 5\n"), 0o644))
	badValue := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(badValue, []byte("concurrency: many\n"), 0o644))
	cases := []struct {
		name string // what is wrong
		args []string
		env  map[string]string
		want string // part of the error message
	}{
		// m must be at least 1.
		{"zero concurrency", []string{"--concurrency", "0"}, nil, "concurrency must be at least 1"},
		// An unknown policy lists the known ones.
		{"unknown policy", []string{"--policy", "fastest"}, nil, "unknown policy"},
		// Plaintext gRPC beyond loopback needs TLS or --insecure.
		{"grpc beyond loopback", []string{"--grpc", "0.0.0.0:0", "--control-token", "t"}, nil, "--insecure"},
		// Control beyond loopback needs a token.
		{"no token beyond loopback", []string{"--grpc", "0.0.0.0:0", "--insecure"}, nil, "--control-token"},
		// Environment values are parsed like flags.
		{"bad env value", nil, map[string]string{"SWD_QUEUE_LIMIT": "lots"}, "SWD_QUEUE_LIMIT"},
		// A config file may only name flags.
		{"unknown config key", []string{"--config", unknown}, nil, "queue-limt"},
		// And its values must parse.
		{"bad config value", []string{"--config", badValue}, nil, "concurrency"},
		// Role must be node or dispatcher.
		{"bad role", []string{"--role", "leader"}, nil, "role must be"},
		// Placement must be arrival or tail.
		{"bad placement", []string{"--placement", "middle"}, nil, "placement"},
		// Gossip keys are base64 AES keys.
		{"bad gossip key", []string{"--gossip-key", "not base64!"}, nil, "--gossip-key"},
		// Log level must be known.
		{"bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		// An address must be host:port.
		{"bad listen address", []string{"--listen", "8080"}, nil, "--listen"},
		// Every transfer is bounded in time, on a node...
		{"node without transfer timeout", []string{"--transfer-timeout", "0"}, nil, "--transfer-timeout"},
		// ...and on a dispatcher, whose settings are validated whole too.
		{"dispatcher without transfer timeout", []string{"--role", "dispatcher", "--transfer-timeout", "0"}, nil, "--transfer-timeout"},
		{"dispatcher with negative retry-after", []string{"--role", "dispatcher", "--retry-after", "-5s"}, nil, "--retry-after"},
		// Both wrong: the first problem is named.
		{"dispatcher with both", []string{"--role", "dispatcher", "--transfer-timeout", "0", "--retry-after", "-5s"}, nil, "--retry-after must not be negative"},
		{"dispatcher with negative body limit", []string{"--role", "dispatcher", "--max-transfer-body", "-1"}, nil, "--max-transfer-body"},
		// The gRPC message limit bounds transfers.
		{"tiny grpc message limit", []string{"--grpc-max-message", "1000"}, nil, "--grpc-max-message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			cmd := newCommand(&out, &errOut)
			cmd.SetArgs(append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, tc.args...))
			err := cmd.Execute()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
