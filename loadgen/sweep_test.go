package loadgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingSwitcher records the policies it was asked for and the size of
// each server's log at that moment.
type recordingSwitcher struct {
	mu    sync.Mutex
	calls []string
	fail  string
}

func (s *recordingSwitcher) SetPolicy(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	if name == s.fail {
		return errors.New("refused")
	}
	return nil
}

// recordingProgress records the events of a sweep.
type recordingProgress struct{ events []string }

func (p *recordingProgress) SweepStarted(runs int, total time.Duration) {
	p.events = append(p.events, fmt.Sprintf("start %d %v", runs, total))
}
func (p *recordingProgress) RunStarted(i int, pol string, rate float64, length time.Duration) {
	p.events = append(p.events, fmt.Sprintf("run %d %s %v %v", i, pol, rate, length))
}
func (p *recordingProgress) RunFinished(i int, res RunResult, err error) {
	p.events = append(p.events, fmt.Sprintf("done %d %v", i, err))
}
func (p *recordingProgress) Note(msg string) { p.events = append(p.events, msg) }
func (p *recordingProgress) SweepFinished()  { p.events = append(p.events, "end") }

func sweepConfig(t *testing.T, nodes []*sleepServer, disp *sleepServer) SweepConfig {
	c := DefaultSweepConfig()
	c.Run = tinyRun()
	c.Run.Warmup, c.Run.Duration = 100*time.Millisecond, 300*time.Millisecond
	c.Rates = []float64{50, 100}
	c.Settle, c.Cooldown = 0, 0
	for _, n := range nodes {
		c.Endpoints.Targets = append(c.Endpoints.Targets, n.URL)
	}
	if disp != nil {
		c.Endpoints.Dispatcher = disp.URL
	}
	c.OutDir = t.TempDir()
	return c
}

func TestSweepSwitchesAndRoutes(t *testing.T) {
	a, b, d := newSleepServer(t, "a"), newSleepServer(t, "b"), newSleepServer(t, "dispatcher")
	c := sweepConfig(t, []*sleepServer{a, b}, d)
	sw := &recordingSwitcher{}
	prog := &recordingProgress{}
	c.Policies, c.Switcher, c.Progress = []string{"rr", "nu"}, sw, prog
	res, err := Sweep(context.Background(), c)
	require.NoError(t, err)

	assert.Equal(t, []string{"rr", "nu"}, sw.calls, "the cluster is switched once per policy, in order")
	require.Len(t, res.Rows, 4)
	for i, want := range []struct {
		pol  string
		rate float64
	}{{"rr", 50}, {"rr", 100}, {"nu", 50}, {"nu", 100}} {
		assert.Equal(t, want.pol, res.Rows[i].Policy)
		assert.Equal(t, want.rate, res.Rows[i].Rate)
		assert.Zero(t, res.Rows[i].Errors)
		assert.Positive(t, res.Rows[i].Requests)
		assert.FileExists(t, filepath.Join(RunDir(c.OutDir, want.pol, want.rate), "results.bin"))
	}
	// rr's runs went to the dispatcher, nu's to the nodes.
	assert.Equal(t, res.Runs[0].Sent+res.Runs[1].Sent, len(d.seen()))
	assert.Equal(t, res.Runs[2].Sent+res.Runs[3].Sent, len(a.seen())+len(b.seen()))

	rows, err := ReadCSVFile(filepath.Join(c.OutDir, "results.csv"))
	require.NoError(t, err)
	sameRows(t, res.Rows, rows)

	assert.Equal(t, []string{
		"start 4 1.6s",
		"switching the cluster to rr", "run 0 rr 50 400ms", "done 0 <nil>", "run 1 rr 100 400ms", "done 1 <nil>",
		"switching the cluster to nu", "run 2 nu 50 400ms", "done 2 <nil>", "run 3 nu 100 400ms", "done 3 <nil>",
		"end",
	}, prog.events)
}

func TestSweepStopsOnFailedSwitch(t *testing.T) {
	a := newSleepServer(t, "a")
	c := sweepConfig(t, []*sleepServer{a}, nil)
	c.Policies, c.Switcher = []string{"nu", "ll"}, &recordingSwitcher{fail: "ll"}
	res, err := Sweep(context.Background(), c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "switch the cluster to ll")
	assert.Len(t, res.Rows, 2, "nu's rows are kept")
	_, statErr := os.Stat(filepath.Join(c.OutDir, "results.csv"))
	assert.NoError(t, statErr, "the CSV holds what was measured")
}

func TestSweepCurrentPolicyWithoutSwitcher(t *testing.T) {
	a := newSleepServer(t, "a")
	c := sweepConfig(t, []*sleepServer{a}, nil)
	c.Policies, c.Rates, c.OutDir = nil, []float64{50}, ""
	res, err := Sweep(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, res.Rows, 1)
	assert.Equal(t, "current", res.Rows[0].Policy)
}

func TestSweepConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*SweepConfig)
		want   string
	}{
		// rr needs a dispatcher.
		{"rr without dispatcher", func(c *SweepConfig) { c.Endpoints.Dispatcher = "" }, "dispatcher"},
		// ll needs nodes.
		{"ll without targets", func(c *SweepConfig) { c.Policies = []string{"ll"}; c.Endpoints.Targets = nil }, "--targets"},
		// Unknown policy names are refused with the known ones.
		{"unknown policy", func(c *SweepConfig) { c.Policies = []string{"fastest"} }, "fastest"},
		// Switching needs a switcher (or --no-switch).
		{"no switcher", func(c *SweepConfig) { c.Switcher = nil }, "--control"},
		// Rates must ascend.
		{"rates descending", func(c *SweepConfig) { c.Rates = []float64{100, 50} }, "ascending"},
		// A policy twice.
		{"duplicate policy", func(c *SweepConfig) { c.Policies = []string{"nu", "nu"} }, "twice"},
		// The run template is checked too.
		{"bad run", func(c *SweepConfig) { c.Run.Duration = 0 }, "duration"},
		// Peers need something to start them.
		{"peers without starter", func(c *SweepConfig) { c.Peers = []string{"haproxy-cq"} }, "--local"},
		// A peer may not share a policy's label.
		{"peer named like a policy", func(c *SweepConfig) { c.Peers = []string{"nu"}; c.PeerStarter = &fakePeers{} }, "twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultSweepConfig()
			c.Endpoints = Endpoints{Targets: []string{"127.0.0.1:1"}, Dispatcher: "127.0.0.1:2"}
			c.Switcher = &recordingSwitcher{}
			tc.change(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	c := DefaultSweepConfig()
	c.Endpoints = Endpoints{Targets: []string{"127.0.0.1:1"}, Dispatcher: "127.0.0.1:2"}
	c.NoSwitch = true
	assert.NoError(t, c.Validate(), "--no-switch trusts the labels")
}

// fakePeers starts a sleepServer per peer and records starts and stops.
type fakePeers struct {
	t       *testing.T
	servers map[string]*sleepServer
	failOn  string // StartPeer fails for this name
	badStop string // stop fails for this name
	events  []string
}

func (f *fakePeers) StartPeer(_ context.Context, name string) (string, func() error, error) {
	f.events = append(f.events, "start "+name)
	if name == f.failOn {
		return "", nil, errors.New("not installed")
	}
	s := newSleepServer(f.t, name)
	if f.servers == nil {
		f.servers = map[string]*sleepServer{}
	}
	f.servers[name] = s
	return s.URL, func() error {
		f.events = append(f.events, "stop "+name)
		if name == f.badStop {
			return errors.New("exited early")
		}
		return nil
	}, nil
}

// Peers come after the policies: each is started, gets every request of
// its runs, and is stopped; their rows carry their names.
func TestSweepPeers(t *testing.T) {
	a := newSleepServer(t, "a")
	c := sweepConfig(t, []*sleepServer{a}, nil)
	fp := &fakePeers{t: t}
	prog := &recordingProgress{}
	c.Policies, c.Switcher, c.Peers, c.PeerStarter, c.Progress = []string{"nu"}, &recordingSwitcher{}, []string{"p1", "p2"}, fp, prog
	res, err := Sweep(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, res.Rows, 6)
	var labels []string
	for _, r := range res.Rows {
		labels = append(labels, r.Policy)
	}
	assert.Equal(t, []string{"nu", "nu", "p1", "p1", "p2", "p2"}, labels)
	assert.Equal(t, []string{"start p1", "stop p1", "start p2", "stop p2"}, fp.events)
	assert.Equal(t, res.Runs[2].Sent+res.Runs[3].Sent, len(fp.servers["p1"].seen()), "p1's runs all went to p1")
	assert.Equal(t, res.Runs[0].Sent+res.Runs[1].Sent, len(a.seen()), "nu's runs went to the nodes")
	assert.Contains(t, prog.events, "starting p1 in front of the apps")
	assert.Equal(t, "start 6 2.4s", prog.events[0])
	assert.FileExists(t, filepath.Join(RunDir(c.OutDir, "p2", 100), "results.bin"))
}

func TestSweepPeerFailures(t *testing.T) {
	cases := []struct {
		name   string
		fp     *fakePeers
		want   string
		rows   int
		events []string
	}{
		// a peer that does not start ends the sweep; the rows so far stay
		{"start fails", &fakePeers{failOn: "p2"}, "start p2: not installed", 2, []string{"start p1", "stop p1", "start p2"}},
		// a peer that was gone when stopped makes its rows suspect: an error
		{"stop fails", &fakePeers{badStop: "p1"}, "stop p1: exited early", 2, []string{"start p1", "stop p1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sweepConfig(t, nil, nil)
			tc.fp.t = t
			c.Policies, c.Peers, c.PeerStarter = nil, []string{"p1", "p2"}, tc.fp
			res, err := Sweep(context.Background(), c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Len(t, res.Rows, tc.rows)
			assert.Equal(t, tc.events, tc.fp.events)
		})
	}
}
