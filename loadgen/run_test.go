package loadgen

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/workload"
)

// tiny is a workload of ~2 ms requests, so runs against sleep servers are
// short and never queue for long.
var tiny = workload.Spec{Name: "custom", MeanMs: 2, CV: 0.5, Burst: 1, Scale: 1}

func tinyRun(targets ...string) RunConfig {
	c := DefaultRunConfig()
	c.Targets = targets
	c.Workload = tiny
	c.Rate = 100
	c.Warmup = 200 * time.Millisecond
	c.Duration = 600 * time.Millisecond
	c.Timeout = 5 * time.Second
	c.Seed = 9
	return c
}

func TestRunAgainstSleepServers(t *testing.T) {
	a, b := newSleepServer(t, "a"), newSleepServer(t, "b")
	c := tinyRun(a.URL, b.URL)
	c.Policy = "nu"
	c.ResultsFile = filepath.Join(t.TempDir(), "nu_100", "results.bin")
	res, err := Run(context.Background(), c)
	require.NoError(t, err)

	sched, err := NewSchedule(c.Workload, c.Rate, c.Seed, c.Warmup, c.Duration)
	require.NoError(t, err)
	measured := 0
	for k := range sched.Arrivals {
		if sched.Measured(k) {
			measured++
		}
	}
	assert.Equal(t, len(sched.Arrivals), res.Sent, "every scheduled request was sent")
	assert.Equal(t, measured, res.Row.Requests, "requests counts the measured window")
	assert.Zero(t, res.Row.Errors)
	assert.Equal(t, "nu", res.Row.Policy)
	assert.Equal(t, 100.0, res.Row.Rate)
	assert.Greater(t, res.Row.MeanMs, 0.0)
	assert.LessOrEqual(t, res.Row.P50Ms, res.Row.P95Ms)
	assert.LessOrEqual(t, res.Row.P95Ms, res.Row.P99Ms)
	assert.LessOrEqual(t, res.Row.P99Ms, res.Row.P995Ms)
	assert.Equal(t, map[uint16]int{200: measured}, res.Codes)
	assert.Equal(t, measured, res.ServedBy["a"]+res.ServedBy["b"])

	// Round robin over the two nodes, and the sizes are the schedule's.
	seenA, seenB := a.seen(), b.seen()
	assert.InDelta(t, len(seenA), len(seenB), 1, "round robin over two nodes")
	var want, got []string
	for _, x := range sched.Arrivals {
		want = append(want, FormatMs(x.SizeMs))
	}
	got = append(append(got, seenA...), seenB...)
	sort.Strings(want)
	sort.Strings(got)
	assert.Equal(t, want, got, "each request carries its scheduled size")

	// results.bin is vegeta's gob encoding of the measured requests, timed
	// from their scheduled instants.
	f, err := os.Open(c.ResultsFile)
	require.NoError(t, err)
	defer f.Close()
	dec := vegeta.NewDecoder(f)
	n := 0
	var metrics vegeta.Metrics
	for {
		var r vegeta.Result
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		assert.Equal(t, "nu@100", r.Attack)
		assert.Contains(t, r.URL, "/work?ms=")
		metrics.Add(&r)
		n++
	}
	metrics.Close()
	assert.Equal(t, measured, n)
	assert.Equal(t, 1.0, metrics.Success)
	assert.InDelta(t, res.Row.MeanMs, float64(metrics.Latencies.Mean)/1e6, 0.01, "vegeta report agrees on the mean")
}

func TestRunCountsErrors(t *testing.T) {
	a := newSleepServer(t, "a")
	a.fail = 2 // sizes above 2 ms get a 500
	c := tinyRun(a.URL)
	res, err := Run(context.Background(), c)
	require.NoError(t, err)
	sched, err := NewSchedule(c.Workload, c.Rate, c.Seed, c.Warmup, c.Duration)
	require.NoError(t, err)
	wantErr := 0
	for k, x := range sched.Arrivals {
		if sched.Measured(k) {
			if v, _ := strconv.ParseFloat(FormatMs(x.SizeMs), 64); v > 2 {
				wantErr++
			}
		}
	}
	require.Positive(t, wantErr)
	assert.Equal(t, wantErr, res.Row.Errors, "every 500 is an error")
	assert.Equal(t, wantErr, res.Codes[500])
	assert.Equal(t, "current", res.Row.Policy, "no policy: the cluster's current one")
}

func TestRunUnreachableTarget(t *testing.T) {
	a := newSleepServer(t, "a")
	url := a.URL
	a.Close() // nothing listens there any more
	c := tinyRun(url)
	c.Warmup, c.Duration = 0, 200*time.Millisecond
	res, err := Run(context.Background(), c)
	require.NoError(t, err, "failed requests are data, not a run error")
	assert.Equal(t, res.Row.Requests, res.Row.Errors)
	assert.True(t, res.Row.Failed(0.01))
}

func TestRunStopsOnCancel(t *testing.T) {
	a := newSleepServer(t, "a")
	c := tinyRun(a.URL)
	c.Warmup, c.Duration = 0, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, c)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Greater(t, res.Row.Requests, res.Sent, "unsent requests of the window count as errors")
	// Unsent requests are errors, and so is anything in flight when the
	// run was stopped (its request is cancelled).
	assert.GreaterOrEqual(t, res.Row.Errors, res.Row.Requests-res.Sent)
	assert.LessOrEqual(t, res.Row.Errors, res.Row.Requests-res.Sent+int(c.Workers)*4)
}

func TestRunConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*RunConfig)
		want   string
	}{
		// Nowhere to send.
		{"no targets", func(c *RunConfig) { c.Targets = nil }, "no targets"},
		// Bad address.
		{"bad target", func(c *RunConfig) { c.Targets = []string{"ftp://x"} }, "not an address"},
		// Rates are positive.
		{"zero rate", func(c *RunConfig) { c.Rate = 0 }, "rate"},
		// A measured window is needed.
		{"zero duration", func(c *RunConfig) { c.Duration = 0 }, "duration"},
		// Negative warm-up.
		{"negative warmup", func(c *RunConfig) { c.Warmup = -1 }, "warm-up"},
		// Requests need a timeout.
		{"zero timeout", func(c *RunConfig) { c.Timeout = 0 }, "timeout"},
		// A cap below the initial worker count.
		{"max workers", func(c *RunConfig) { c.Workers, c.MaxWorkers = 10, 5 }, "max workers"},
		// The workload's own check.
		{"bad workload", func(c *RunConfig) { c.Workload.Burst = 0 }, "burst"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc := tinyRun("127.0.0.1:1")
			c.change(&rc)
			err := rc.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	assert.NoError(t, tinyRun("127.0.0.1:1").Validate())
}
