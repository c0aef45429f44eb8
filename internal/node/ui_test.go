package node

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Policy epochs are wall-clock milliseconds: the page shows them as times,
// and the startup epoch as none.
func TestEpochTime(t *testing.T) {
	assert.Empty(t, epochTime(0))
	assert.Empty(t, epochTime(-3))
	ms := time.Date(2026, 11, 26, 21, 57, 9, 0, time.UTC).UnixMilli()
	assert.Equal(t, "2026-11-26T21:57:09Z", epochTime(ms))
}

// The admin mux serves the page with a CSP that forbids inline scripts,
// only its embedded scripts under /ui/, and /ui/state with a validated
// since parameter; a node not yet in a cluster reports itself alone.
func TestUIHandlers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName = "node-0"
	n, err := New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	registerUI(mux, n)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := get("/ui")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self';")
	assert.Contains(t, body, `<script src="/ui/ui.js">`)
	for _, asset := range []string{"/ui/ui.js", "/ui/chart.min.js"} {
		resp, body = get(asset)
		assert.Equal(t, http.StatusOK, resp.StatusCode, asset)
		assert.Contains(t, resp.Header.Get("Content-Type"), "javascript", asset)
		assert.NotEmpty(t, body, asset)
	}
	resp, _ = get("/ui/LICENSE")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only the listed assets")
	resp, _ = get("/ui/state?since=-1")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, body = get("/ui/state?since=0")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st uiState
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, "node-0", st.Node)
	assert.Equal(t, "nu", st.Policy)
	assert.Empty(t, st.EpochTime, "the startup epoch")
	assert.NotNil(t, st.Nodes)
	assert.NotNil(t, st.Edges)
	assert.InDelta(t, time.Now().UnixMilli(), st.TimeMs, float64(time.Minute.Milliseconds()))
}
