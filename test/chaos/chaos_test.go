package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/test/testutil"
)

// A short chaos run, under each transfer policy that moves requests
// differently (nu pushes from the tail, steal pulls the head): 4 nodes at
// 60 % load for 12 s, a node SIGKILLed every 4 s and restarted. Nothing is
// lost; no live node answers with an error.
func TestShortChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping chaos run in -short mode")
	}
	bin := filepath.Join(testutil.RepoRoot(), "bin")
	if _, err := os.Stat(filepath.Join(bin, "swd")); err != nil {
		t.Skipf("skipping: bin/swd not built (run `make build`): %v", err)
	}
	for _, policy := range []string{"nu", "steal"} {
		t.Run(policy, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.Load, cfg.Duration, cfg.KillEvery, cfg.DownFor = 4, 0.6, 12*time.Second, 4*time.Second, time.Second
			cfg.Policy = policy
			cfg.BinDir, cfg.LogDir, cfg.Logf = bin, t.TempDir(), t.Logf
			res, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			t.Logf("\n%s", res)
			assert.Zero(t, res.Lost, "requests lost")
			assert.Empty(t, res.ErrorsByCause, "errors at nodes that were not killed")
			assert.GreaterOrEqual(t, res.Kills, 2)
			var answered int64
			for code, n := range res.ByStatus {
				answered += n
				assert.Equal(t, 200, code, "non-200 answers: %v", res.ByStatus)
			}
			assert.Equal(t, res.Sent, answered+res.DiedWithNode, "every request answered or died with its node")
		})
	}
}
