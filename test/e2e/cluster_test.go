package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// Under nu, with every request sent to node 0, every request is answered
// exactly once and the other nodes do a fair share of the work.
func TestNearestUnderloadedSpreadsLoad(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu" })
	const n = 200
	hc := client()
	// Open loop at about 2.5x one node's capacity: 20 ms requests every 20 ms / 2.5.
	answers := make([]answer, n)
	testutil.OpenLoop(n, 8*time.Millisecond, func(i int) {
		answers[i] = get(hc, "http://"+c.Info.Nodes[0].HTTP+"/work?ms=20")
	})
	require.Equal(t, map[string]int{"200": n}, countStatus(answers))
	var total uint64
	served := map[string]uint64{}
	for _, nd := range c.Info.Nodes {
		s := testutil.AppStats(t, nd.App)
		served[nd.Name] = s.Served
		total += s.Served
	}
	assert.EqualValues(t, n, total, "apps served %v", served)
	for _, nd := range c.Info.Nodes[1:] {
		// A fair share is n/4 = 50; node 0 can serve at most ~40 % of this
		// load itself, so every other node must take a real part.
		assert.GreaterOrEqual(t, served[nd.Name], uint64(n/10), "node %s served too little: %v", nd.Name, served)
	}
	byHeader := map[string]int{}
	for _, a := range answers {
		byHeader[a.servedBy]++
	}
	for name, cnt := range byHeader {
		assert.EqualValues(t, served[name], cnt, "answers by X-Served-By %v vs apps %v", byHeader, served)
	}
}

// A dispatcher under rr sends requests to the nodes in strict turn.
func TestDispatcherRoundRobinStrictTurn(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "rr"; cfg.Dispatcher = true })
	hc := client()
	var order []string
	for i := 0; i < 12; i++ {
		a := get(hc, "http://"+c.Info.Dispatcher.HTTP+"/work?ms=1")
		require.NoError(t, a.err)
		require.Equal(t, 200, a.status)
		order = append(order, a.servedBy)
	}
	for i := 4; i < len(order); i++ {
		assert.Equal(t, order[i-4], order[i], "not in strict turn: %v", order)
	}
	seen := map[string]bool{}
	for _, s := range order[:4] {
		seen[s] = true
	}
	assert.Len(t, seen, 4, "a turn must visit every node: %v", order)
}

// Switching nu → ll → none → nu across the cluster under load loses no
// request and answers none twice.
func TestLivePolicySwitchUnderLoad(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu" })
	cl := testutil.Control(t, c.Info.Nodes[1].GRPC)
	hc := client()
	stop := make(chan struct{})
	var sent atomic.Int64
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sent.Add(1)
			inner.Add(1)
			go func() {
				defer inner.Done()
				a := get(hc, "http://"+c.Info.Nodes[i%2].HTTP+"/work?ms=10")
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}()
		}
	}()
	for _, p := range []string{"ll", "none", "nu"} {
		time.Sleep(300 * time.Millisecond) // let load run under the previous policy
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := cl.SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: p, Cluster: true})
		cancel()
		require.NoError(t, err)
		require.Len(t, r.GetResults(), 4)
		for _, res := range r.GetResults() {
			assert.True(t, res.GetOk(), "%s: %s", res.GetNode(), res.GetError())
			assert.Equal(t, p, res.GetState().GetName())
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.EqualValues(t, sent.Load(), len(answers))
	assert.Equal(t, map[string]int{"200": len(answers)}, countStatus(answers))
	var total uint64
	for _, nd := range c.Info.Nodes {
		total += testutil.AppStats(t, nd.App).Served
	}
	assert.EqualValues(t, len(answers), total, "apps served a different number of requests than were answered")
	for _, nd := range c.Info.Nodes {
		got := testutil.Status(t, testutil.Control(t, nd.GRPC)).GetPolicy()
		assert.Equal(t, "nu", got.GetName(), nd.Name)
	}
}

// With one node down, a cluster-wide switch reports that node and
// succeeds on the others.
func TestPolicySwitchWithNodeDown(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu" })
	require.NoError(t, c.Kill("node-3"))
	cl := testutil.Control(t, c.Info.Nodes[0].GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	r, err := cl.SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: "ll", Cluster: true})
	require.NoError(t, err)
	t.Logf("cluster-wide switch with a node down took %s", time.Since(start))
	okNodes := map[string]bool{}
	var failed []string
	for _, res := range r.GetResults() {
		if res.GetOk() {
			okNodes[res.GetNode()] = true
		} else {
			failed = append(failed, res.GetNode())
		}
	}
	assert.Equal(t, map[string]bool{"node-0": true, "node-1": true, "node-2": true}, okNodes)
	// node-3 is reported as failed unless memberlist already declared it dead.
	if len(r.GetResults()) == 4 {
		assert.Equal(t, []string{"node-3"}, failed)
	}
}

// The control API refuses calls without the right token.
func TestControlToken(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 2
		cfg.ControlToken = "s3cret"
	})
	addr := c.Info.Nodes[0].GRPC
	dial := func(token string) swdv1.ControlClient {
		var opts []grpc.DialOption
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: token}))
		}
		return testutil.Control(t, addr, opts...)
	}
	cases := []struct {
		name  string // what the client presents
		token string
		code  codes.Code
	}{
		{"no token is refused", "", codes.Unauthenticated},
		{"a wrong token is refused", "guess", codes.Unauthenticated},
		{"the right token works", "s3cret", codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := dial(tc.token).Status(ctx, &swdv1.StatusRequest{})
			assert.Equal(t, tc.code, grpcstatus.Code(err), "%v", err)
			_, err = dial(tc.token).SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: "ll", Cluster: true})
			assert.Equal(t, tc.code, grpcstatus.Code(err), "%v", err)
		})
	}
	// The swdctl binary says what to do.
	out, err := exec.Command(filepath.Join(binDir(t), "swdctl"), "--addr", addr, "status").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "SWD_CONTROL_TOKEN")

	// Transfers need the token too: one without it is refused...
	cc, err := grpc.NewClient(c.Info.Nodes[1].GRPC, testutil.Plaintext())
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := swdv1.NewTransferClient(cc).Forward(ctx, &swdv1.ForwardRequest{Method: "GET", Path: "/work", RawQuery: "ms=1", FromNode: "node-0", Hops: 1})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.Unauthenticated, grpcstatus.Code(err), "%v", err)
	assert.Zero(t, testutil.AppStats(t, c.Info.Nodes[1].App).Served, "a transfer without the token ran")
	// ...and so do pulls (policy steal), authenticated exactly like Forward.
	_, err = swdv1.NewTransferClient(cc).Pull(ctx, &swdv1.PullRequest{FromNode: "node-0", PullId: 1})
	assert.Equal(t, codes.Unauthenticated, grpcstatus.Code(err), "%v", err)
	// ...while the nodes' own transfers, which carry it, go through.
	answers := fire(client(), 20, func(int) string { return "http://" + c.Info.Nodes[0].HTTP + "/work?ms=50" })
	assert.Equal(t, map[string]int{"200": 20}, countStatus(answers))
	assert.Positive(t, testutil.AppStats(t, c.Info.Nodes[1].App).Served, "no transfer reached node-1")
}

// `swdctl local up` leaves no process behind, whether stopped with SIGINT
// or killed with SIGKILL.
func TestLocalUpLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	bin := binDir(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "swdctl"), "local", "up", "--nodes", "2", "--dispatcher", "--bin-dir", bin)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			var info localcluster.Info
			require.NoError(t, json.Unmarshal([]byte(line), &info))
			require.Len(t, info.Nodes, 2)
			require.NotNil(t, info.Dispatcher)
			kids := children(cmd.Process.Pid)
			require.Len(t, kids, 5, "2 swd + 2 dummyapp + 1 dispatcher")
			require.NoError(t, cmd.Process.Signal(sig))
			_ = cmd.Wait()
			require.Eventually(t, func() bool {
				for _, pid := range kids {
					if alive(pid) {
						return false
					}
				}
				return true
			}, 30*time.Second, 20*time.Millisecond, "children left behind after %s", sig)
		})
	}
}

// children lists the PIDs whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// A node that joins after a cluster-wide switch (here: restarted with its
// old --policy) adopts the cluster's current policy from gossip.
func TestLateJoinerAdoptsPolicy(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 3; cfg.Policy = "nu" })
	cl := testutil.Control(t, c.Info.Nodes[0].GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: "ll", Cluster: true})
	require.NoError(t, err)
	epoch := r.GetResults()[0].GetState().GetEpoch()
	require.NoError(t, c.Kill("node-2"))
	require.NoError(t, c.Restart("node-2"))
	late := testutil.Control(t, c.Info.Nodes[2].GRPC)
	require.Eventually(t, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		p, err := late.GetPolicy(cctx, &swdv1.GetPolicyRequest{})
		return err == nil && p.GetName() == "ll" && p.GetEpoch() == epoch
	}, 30*time.Second, 50*time.Millisecond, "the restarted node never adopted ll@%d", epoch)
}

// The gossip key rotates cluster-wide through swdctl (install, use, remove)
// without a partition: every member keeps every other, and all end with
// only the new key.
func TestGossipKeyRotationWithSwdctl(t *testing.T) {
	const oldKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
	const newKey = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=" // 32 bytes
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 3
		cfg.SwdArgs = []string{"--gossip-key=" + oldKey}
	})
	swdctl := filepath.Join(binDir(t), "swdctl")
	run := func(args ...string) string {
		out, err := exec.Command(swdctl, append([]string{"--addr", c.Info.Nodes[0].GRPC}, args...)...).CombinedOutput()
		require.NoError(t, err, "swdctl %v: %s", args, out)
		return string(out)
	}
	allSeeAll := func(step string) {
		for _, nd := range c.Info.Nodes {
			s := testutil.Status(t, testutil.Control(t, nd.GRPC))
			require.EqualValues(t, 3, s.GetMembers(), "%s: %s lost a member", step, nd.Name)
		}
	}
	before := run("gossip-key", "list", "--cluster", "-o", "json")
	for _, step := range [][]string{{"install", newKey}, {"use", newKey}, {"remove", oldKey}} {
		run(append([]string{"gossip-key"}, append(step, "--cluster")...)...)
		time.Sleep(500 * time.Millisecond) // gossip under the new keyring for a while
		allSeeAll(step[0])
	}
	after := run("gossip-key", "list", "--cluster", "-o", "json")
	var rows []struct {
		Node         string   `json:"node"`
		OK           bool     `json:"ok"`
		Fingerprints []string `json:"fingerprints"`
	}
	require.NoError(t, json.Unmarshal([]byte(after), &rows))
	require.Len(t, rows, 3)
	for _, r := range rows {
		assert.True(t, r.OK)
		require.Len(t, r.Fingerprints, 1, "%s keeps more than the new key", r.Node)
		assert.NotContains(t, before, r.Fingerprints[0], "the key did not change")
	}
	// Every entry is still fresh: gossip flows with the new key.
	require.Eventually(t, func() bool {
		for _, v := range testutil.Status(t, testutil.Control(t, c.Info.Nodes[2].GRPC)).GetView() {
			if !v.GetKnown() {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
}
