package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSessionsUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		// no cluster at all
		{name: "no cluster", args: []string{"sessions"}, want: "no cluster"},
		// a mode swd does not have
		{name: "bad mode", args: []string{"sessions", "--local", "1", "--admission", "fifo"}, want: "--admission"},
		// a running cluster runs one mode
		{name: "two modes on targets", args: []string{"sessions", "--targets", "127.0.0.1:1", "--admission", "none,sqs"}, want: "one admission mode"},
		// an unknown output format
		{name: "output", args: []string{"sessions", "--targets", "127.0.0.1:1", "--admission", "sqs", "-o", "xml"}, want: "--output"},
		// no client count
		{name: "clients", args: []string{"sessions", "--targets", "127.0.0.1:1", "--admission", "sqs", "--clients", "0"}, want: "--clients"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, c.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestSessionsAgainstTargetsJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			http.SetCookie(w, &http.Cookie{Name: "SWDSESSION", Value: "x"})
		}
	}))
	defer srv.Close()
	code, stdout, stderr := run(t, nil, "sessions", "--targets", srv.URL, "--admission", "sqs", "--clients", "2",
		"--duration", "200ms", "--warmup", "0s", "--cooldown", "0s", "--think", "1ms", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Rows []struct {
			Mode      string `json:"mode"`
			Clients   int    `json:"clients"`
			Completed uint64 `json:"completed"`
		} `json:"rows"`
		Summaries []struct {
			Mode string `json:"mode"`
		} `json:"summaries"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Rows, 1)
	assert.Equal(t, "sqs", rep.Rows[0].Mode)
	assert.Equal(t, 2, rep.Rows[0].Clients)
	assert.Positive(t, rep.Rows[0].Completed)
	require.Len(t, rep.Summaries, 1)
}
