package loadgen

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fakeLocal(t *testing.T, mode string) LocalConfig {
	t.Setenv(fakeSwdctlEnv, mode)
	c := DefaultLocalConfig()
	c.Swdctl = os.Args[0]
	c.Nodes = 2
	c.ReadyTimeout = 10 * time.Second
	c.StopTimeout = 5 * time.Second
	return c
}

func TestLocalClusterLifecycle(t *testing.T) {
	cases := []struct {
		name string
		mode string
	}{
		// The address line comes first.
		{"ready", "ready"},
		// Log lines and a JSON line without nodes come before it.
		{"noisy", "noisy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lc, err := StartLocal(context.Background(), fakeLocal(t, c.mode))
			require.NoError(t, err)
			assert.Equal(t, []string{"127.0.0.1:18080", "127.0.0.1:18081"}, lc.Targets())
			assert.Equal(t, "127.0.0.1:17070", lc.Control())
			assert.Equal(t, "127.0.0.1:18090", lc.DispatcherHTTP())
			assert.Equal(t, "127.0.0.1:17090", lc.DispatcherGRPC())
			assert.Equal(t, "n1", lc.Nodes[1].Name)
			require.NoError(t, lc.Close(), "SIGINT stops it cleanly")
			<-lc.Done()
			assert.NoError(t, lc.Close(), "Close is idempotent")
		})
	}
}

func TestLocalClusterFailures(t *testing.T) {
	t.Run("exits before ready", func(t *testing.T) {
		_, err := StartLocal(context.Background(), fakeLocal(t, "exit"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "exited before printing its addresses")
	})
	t.Run("never ready", func(t *testing.T) {
		c := fakeLocal(t, "silent")
		c.ReadyTimeout = 300 * time.Millisecond
		_, err := StartLocal(context.Background(), c)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "--local-timeout")
	})
	t.Run("ignores SIGINT", func(t *testing.T) {
		c := fakeLocal(t, "stubborn")
		c.StopTimeout = 300 * time.Millisecond
		lc, err := StartLocal(context.Background(), c)
		require.NoError(t, err)
		err = lc.Close()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "killed")
		<-lc.Done()
	})
	t.Run("missing binary", func(t *testing.T) {
		c := DefaultLocalConfig()
		c.Swdctl = "/nonexistent/swdctl"
		_, err := StartLocal(context.Background(), c)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "make build")
	})
}

func TestParseLocalAddrs(t *testing.T) {
	cases := []struct {
		name string
		line string
		err  string
	}{
		// The agreed shape.
		{"ok", `{"nodes":[{"name":"a","http":"h:1","grpc":"g:1","admin":"x","app":"y"}],"dispatcher":{"http":"h:9","grpc":"g:9"}}`, ""},
		// Unknown fields are fine (swdctl may add some).
		{"extra fields", `{"nodes":[{"name":"a","http":"h:1","grpc":"g:1","gossip":"z"}],"version":"1"}`, ""},
		// Not JSON.
		{"not json", `nodes: a`, "not JSON"},
		// No nodes.
		{"no nodes", `{"nodes":[]}`, "no nodes"},
		// A node without its grpc address.
		{"no grpc", `{"nodes":[{"http":"h:1"}]}`, "lacks"},
		// A dispatcher without http.
		{"bad dispatcher", `{"nodes":[{"http":"h:1","grpc":"g:1"}],"dispatcher":{"grpc":"g:9"}}`, "dispatcher"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLocalAddrs([]byte(c.line))
			if c.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}
