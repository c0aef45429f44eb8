package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/dummyapp"
	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

// Requests whose bodies are spooled (above --max-transfer-body, and above
// one gRPC message) queue behind a busy slot on node-0 and move to the idle
// node-1 under nu by Transfer.ForwardStream; node-1's app reads every byte
// of each one it serves (issue 17 item 3).
func TestSpooledBodiesMove(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 2
		cfg.Policy = "nu"
		cfg.SwdArgs = append(cfg.SwdArgs, "--max-transfer-body", "65536")
	})
	const n, size = 6, 5 << 20
	payload := bytes.Repeat([]byte("s"), size)
	hc := client()
	type reply struct {
		status int
		work   dummyapp.WorkReply
		by     string // X-Served-By
		err    error
	}
	replies := make([]reply, n)
	testutil.Concurrently(n, func(i int) {
		resp, err := hc.Post("http://"+c.Info.Nodes[0].HTTP+"/work?ms=300", "application/octet-stream", bytes.NewReader(payload))
		if err != nil {
			replies[i].err = err
			return
		}
		defer resp.Body.Close()
		replies[i].status, replies[i].by = resp.StatusCode, resp.Header.Get("X-Served-By")
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(body, &replies[i].work)
		}
		replies[i].err = err
	})()
	served := map[string]int{}
	for i, r := range replies {
		require.NoError(t, r.err, "request %d", i)
		require.Equal(t, http.StatusOK, r.status, "request %d", i)
		assert.EqualValues(t, size, r.work.BodyBytes, "request %d: the app read the whole body", i)
		served[r.by]++
	}
	n1 := c.Info.Nodes[1]
	assert.GreaterOrEqual(t, served[n1.Name], 1, "no spooled request moved to the idle node: %v", served)
	assert.EqualValues(t, uint64(served[n1.Name])*size, testutil.AppStats(t, n1.App).BodyBytes, "node-1's app read the bodies it served")
	var total uint64
	for _, nd := range c.Info.Nodes {
		total += testutil.AppStats(t, nd.App).BodyBytes
	}
	assert.EqualValues(t, n*size, total, "every body reached an app exactly once: %v", served)
}
