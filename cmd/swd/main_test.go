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
		// Issue 17, item 7: settings that would switch a defence off.
		{"no header timeout", []string{"--read-header-timeout", "0"}, nil, "--read-header-timeout must be positive"},
		{"queue without timeout", []string{"--queue-timeout", "0"}, nil, "--queue-timeout must be positive"},
		{"zero header limit", []string{"--max-header-bytes", "0"}, nil, "--max-header-bytes must be positive"},
		{"negative header limit", []string{"--max-header-bytes", "-1"}, nil, "--max-header-bytes must be positive"},
		{"negative idle timeout", []string{"--idle-timeout", "-1s"}, nil, "--idle-timeout must be positive"},
		{"zero h2 streams", []string{"--max-concurrent-streams", "0"}, nil, "--max-concurrent-streams must be between"},
		{"negative h2 streams", []string{"--max-concurrent-streams", "-1"}, nil, "--max-concurrent-streams must be between"},
		{"bad idempotent method", []string{"--idempotent-methods", "POST,G T"}, nil, `"G T" is not an HTTP method`},
		{"app is swd itself", []string{"--listen", "127.0.0.1:18089", "--app", "http://localhost:18089"}, nil, "is swd's own --listen"},
		{"app is swd itself, any address", []string{"--listen", ":18089", "--app", "http://127.0.0.1:18089/"}, nil, "is swd's own --listen"},
		{"no body idle timeout", []string{"--body-idle-timeout", "0"}, nil, "--body-idle-timeout must be positive"},
		{"buffer budget below one body", []string{"--max-buffered-bytes", "1000"}, nil, "--max-buffered-bytes must be at least"},
		{"bad upgrade slot", []string{"--upgrade-slot", "maybe"}, nil, "--upgrade-slot"},
		// Issue 17, item 5: gossip beyond loopback needs a key or --insecure.
		{"gossip beyond loopback without key", []string{"--gossip", "0.0.0.0:0"}, nil, "--gossip 0.0.0.0:0 is beyond loopback without --gossip-key"},
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
