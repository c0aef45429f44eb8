package security

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The admin port (read-only, no authentication) never reveals the control
// token, on any of its pages.
func TestAdminDoesNotRevealControlToken(t *testing.T) {
	binDir(t)
	t.Parallel()
	const token = "s3cret-token-for-admin-test"
	nd := oneNode(t, "node-0", "--control-token", token, "--pprof")
	hc := &http.Client{Timeout: 10 * time.Second}
	cases := []struct {
		path string
		bug  string // if set, the page is known to leak and the case is skipped
	}{
		// health and readiness
		{"/healthz", ""},
		{"/readyz", ""},
		// Prometheus metrics
		{"/metrics", ""},
		// the status page and its state
		{"/ui", ""},
		{"/ui/state", ""},
		// pprof's index
		{"/debug/pprof/", ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			if tc.bug != "" {
				t.Skip(tc.bug)
			}
			resp, err := hc.Get("http://" + nd.Admin + tc.path)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.False(t, strings.Contains(string(b), token), "%s reveals the control token", tc.path)
			for k, v := range resp.Header {
				assert.NotContains(t, strings.Join(v, " "), token, "header %s", k)
			}
		})
	}
	// pprof's command line page would print argv, flags included: swd does
	// not serve it.
	resp, err := hc.Get("http://" + nd.Admin + "/debug/pprof/cmdline")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}
