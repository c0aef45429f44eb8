package loadgen

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunSessionsCounts(t *testing.T) {
	cases := []struct {
		name string
		// status answers each page (by path) of a session with cookie
		// "s" set by /login
		status map[string]int
		check  func(t *testing.T, r SessionResult)
	}{
		// every page served: sessions complete, nothing fails
		{name: "all served", status: map[string]int{}, check: func(t *testing.T, r SessionResult) {
			assert.Positive(t, r.Completed)
			assert.Zero(t, r.FailedAfterStart)
			assert.Zero(t, r.FirstRefused)
			assert.Positive(t, r.PagesPerSec["/heavy"])
		}},
		// the heavy (last) page fails: every session fails after start,
		// wasting its 2 earlier pages
		{name: "heavy fails", status: map[string]int{"/heavy": http.StatusBadGateway}, check: func(t *testing.T, r SessionResult) {
			assert.Zero(t, r.Completed)
			assert.Positive(t, r.FailedAfterStart)
			assert.Equal(t, 2*r.FailedAfterStart, r.WastedPages)
		}},
		// first pages refused: nothing starts, nothing fails after start
		{name: "first refused", status: map[string]int{"/login": http.StatusServiceUnavailable}, check: func(t *testing.T, r SessionResult) {
			assert.Zero(t, r.Completed)
			assert.Zero(t, r.FailedAfterStart)
			assert.Positive(t, r.FirstRefused)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/login" {
					if ck, err := r.Cookie("SID"); err != nil || ck.Value != "s" {
						w.WriteHeader(http.StatusForbidden) // a later page without the session
						return
					}
				} else {
					http.SetCookie(w, &http.Cookie{Name: "SID", Value: "s"})
				}
				if st, ok := c.status[r.URL.Path]; ok {
					w.WriteHeader(st)
				}
			}))
			defer srv.Close()
			res, err := RunSessions(context.Background(), SessionConfig{
				Targets: []string{srv.URL}, Clients: 3, Duration: 300 * time.Millisecond,
				Pages: []string{"/login", "/light", "/heavy"}, Think: time.Millisecond,
				Timeout: 5 * time.Second, Backoff: time.Millisecond, Cookie: "SID",
			})
			require.NoError(t, err)
			c.check(t, res)
		})
	}
}

func TestSessionReportSummaries(t *testing.T) {
	r := SessionReport{Rows: []SessionRow{
		{Mode: "sqs", SessionResult: SessionResult{Clients: 10, SessionsPerSec: 8}},
		{Mode: "sqs", SessionResult: SessionResult{Clients: 25, SessionsPerSec: 10}},
		{Mode: "sqs", SessionResult: SessionResult{Clients: 100, SessionsPerSec: 9.5}},
		{Mode: "none", SessionResult: SessionResult{Clients: 10, SessionsPerSec: 8, FailedAfterStart: 1}},
		{Mode: "none", SessionResult: SessionResult{Clients: 100, SessionsPerSec: 2, FailedAfterStart: 50}},
	}}
	s := r.Summaries()
	require.Len(t, s, 2)
	assert.Equal(t, SessionSummary{Mode: "sqs", PeakPerSec: 10, PeakClients: 25, MaxClients: 100, AtMax: 9.5, Ratio: 0.95}, s[0])
	assert.Equal(t, SessionSummary{Mode: "none", PeakPerSec: 8, PeakClients: 10, MaxClients: 100, AtMax: 2, Ratio: 0.25, FailedAfterStart: 51}, s[1])
	var b bytes.Buffer
	require.NoError(t, r.WriteTable(&b))
	assert.Contains(t, b.String(), "sqs")
	b.Reset()
	require.NoError(t, r.WriteCSV(&b))
	assert.Contains(t, b.String(), "sqs,100,9.500")
}

// WritePlot draws a PNG for a sweep (failed-after-start lines only where
// there were any) and refuses an empty report.
func TestSessionReportWritePlot(t *testing.T) {
	dir := t.TempDir()
	r := SessionReport{Title: "sessions", Rows: []SessionRow{
		{Mode: "sqs", SessionResult: SessionResult{Clients: 10, SessionsPerSec: 8, Window: time.Second}},
		{Mode: "sqs", SessionResult: SessionResult{Clients: 40, SessionsPerSec: 9.5, Window: time.Second}},
		{Mode: "none", SessionResult: SessionResult{Clients: 10, SessionsPerSec: 8, Window: time.Second}},
		{Mode: "none", SessionResult: SessionResult{Clients: 40, SessionsPerSec: 2, FailedAfterStart: 30, Window: time.Second}},
	}}
	path := filepath.Join(dir, "sessions.png")
	require.NoError(t, r.WritePlot(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG file")
	assert.Error(t, SessionReport{}.WritePlot(filepath.Join(dir, "empty.png")))
}
