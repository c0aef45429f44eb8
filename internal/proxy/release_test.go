package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fixedRT struct{ resp *http.Response }

func (f fixedRT) RoundTrip(*http.Request) (*http.Response, error) { return f.resp, nil }

// The app slot is freed when the app's answer has been read to its end,
// before the client has taken it all; upgrade answers are left alone.
func TestReleasingTransport(t *testing.T) {
	cases := []struct {
		name         string // the app's answer
		status       int
		freeUpgrades bool
		wrapped      bool
		released     int // releases right after RoundTrip
	}{
		// An ordinary answer: released at EOF.
		{"ok answer", http.StatusOK, false, true, 0},
		// An upgrade: its body is the connection, never wrapped; it holds
		// its slot (--upgrade-slot hold).
		{"switching protocols", http.StatusSwitchingProtocols, false, false, 0},
		// An upgrade with --upgrade-slot free: the slot is freed at once.
		{"switching protocols, slot freed", http.StatusSwitchingProtocols, true, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			released := 0
			p := &pending{release: func() { released++ }}
			req, err := http.NewRequestWithContext(context.WithValue(context.Background(), ctxKey{}, p), http.MethodGet, "http://app/", nil)
			require.NoError(t, err)
			rt := releasingTransport{RoundTripper: fixedRT{&http.Response{StatusCode: tc.status, Body: io.NopCloser(strings.NewReader("hello"))}}, freeUpgrades: tc.freeUpgrades}
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, tc.released, released)
			_, isWrapped := resp.Body.(*releaseOnEOF)
			assert.Equal(t, tc.wrapped, isWrapped)
			if !tc.wrapped {
				return
			}
			buf := make([]byte, 2)
			_, _ = resp.Body.Read(buf)
			assert.Zero(t, released, "released before the end of the answer")
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, "llo", string(b))
			assert.Equal(t, 1, released, "released at EOF")
		})
	}
	// A request served without a pending (not through serveLocal) passes through.
	rt := releasingTransport{RoundTripper: fixedRT{&http.Response{StatusCode: 200, Body: http.NoBody}}}
	req, _ := http.NewRequest(http.MethodGet, "http://app/", nil)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, http.NoBody, resp.Body)
}
