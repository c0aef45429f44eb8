// Package chaos runs SWD's chaos experiment: a local cluster under open-loop
// load while nodes are SIGKILLed and restarted, counting every request's
// fate. `make chaos` runs the long version (cmd/chaos); a short one runs in
// `make test`.
//
// The client behaves like a load balancer: it sends to the nodes in
// rotation round robin, retries on the next node when a connection is
// refused (the request never reached any swd), takes a node out of rotation
// the moment it is killed and back once it has rejoined. Requests a killed
// node had already accepted die with it and are counted apart: no
// sidecar can answer on a connection whose process is gone. Every other
// request must get an answer; "lost" counts requests that got neither an
// answer nor an error before the client deadline, and must be zero.
//
// Concurrency: Run is safe to call from one goroutine at a time per cluster.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// Config configures a chaos run.
type Config struct {
	Nodes     int
	Policy    string
	BinDir    string
	LogDir    string
	Load      float64       // offered load as a fraction of capacity
	ServiceMs float64       // every request's service time
	Duration  time.Duration // how long load is offered
	KillEvery time.Duration // one node is SIGKILLed this often
	DownFor   time.Duration // how long a killed node stays down
	Deadline  time.Duration // client timeout: past it a request is lost
	Seed      uint64
	Logf      func(format string, args ...any)
}

// DefaultConfig is the `make chaos` experiment: 8 nodes at 70 % load for
// 60 s, a node killed every 10 s.
func DefaultConfig() Config {
	return Config{Nodes: 8, Policy: "nu", Load: 0.7, ServiceMs: 20, Duration: 60 * time.Second,
		KillEvery: 10 * time.Second, DownFor: 2 * time.Second, Deadline: 30 * time.Second, Seed: 1}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 2:
		return fmt.Errorf("chaos needs at least 2 nodes, got %d", c.Nodes)
	case !(c.Load > 0):
		return fmt.Errorf("load must be positive, got %v", c.Load)
	case !(c.ServiceMs > 0):
		return fmt.Errorf("service time must be positive, got %v", c.ServiceMs)
	case c.Duration <= 0 || c.KillEvery <= 0 || c.DownFor <= 0 || c.Deadline <= 0:
		return errors.New("duration, kill interval, down time and deadline must be positive")
	}
	return nil
}

// Result counts every request's fate.
type Result struct {
	Sent          int64
	ByStatus      map[int]int64
	ErrorsByCause map[string]int64 // errors at nodes that were not killed
	DiedWithNode  int64            // accepted by a node that was then SIGKILLed
	Retried       int64            // connection refused, resent to the next node
	Lost          int64            // no answer and no error before the deadline
	Kills         int
	HealSeconds   []float64 // time from restart to full membership
}

// String renders the result as a small report.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests sent          %d\n", r.Sent)
	codes := make([]int, 0, len(r.ByStatus))
	for c := range r.ByStatus {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		fmt.Fprintf(&b, "answered %d           %d\n", c, r.ByStatus[c])
	}
	fmt.Fprintf(&b, "died with killed node  %d\n", r.DiedWithNode)
	causes := make([]string, 0, len(r.ErrorsByCause))
	for c := range r.ErrorsByCause {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	for _, c := range causes {
		fmt.Fprintf(&b, "error (%s)  %d\n", c, r.ErrorsByCause[c])
	}
	fmt.Fprintf(&b, "resent after refusal   %d\n", r.Retried)
	fmt.Fprintf(&b, "lost (no answer)       %d\n", r.Lost)
	fmt.Fprintf(&b, "kills                  %d\n", r.Kills)
	if len(r.HealSeconds) > 0 {
		fmt.Fprintf(&b, "time to heal (s)       %v\n", r.HealSeconds)
	}
	return b.String()
}

type nodeState struct {
	info       localcluster.NodeInfo
	inRotation atomic.Bool
	mu         sync.Mutex
	killedAt   []time.Time
}

// killedDuring reports whether the node was killed between from and to.
func (n *nodeState) killedDuring(from, to time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range n.killedAt {
		if !k.Before(from) && !k.After(to) {
			return true
		}
	}
	return false
}

// Run performs one chaos experiment.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	lc := localcluster.DefaultConfig()
	lc.Nodes, lc.Policy, lc.BinDir, lc.LogDir = cfg.Nodes, cfg.Policy, cfg.BinDir, cfg.LogDir
	lc.ReadyTimeout = 60 * time.Second
	c, err := localcluster.Start(ctx, lc)
	if err != nil {
		return Result{}, err
	}
	defer c.Stop(20 * time.Second)

	nodes := make([]*nodeState, cfg.Nodes)
	for i, ni := range c.Info.Nodes {
		nodes[i] = &nodeState{info: ni}
		nodes[i].inRotation.Store(true)
	}
	res := Result{ByStatus: map[int]int64{}, ErrorsByCause: map[string]int64{}}
	var mu sync.Mutex
	hc := &http.Client{
		Timeout: cfg.Deadline,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 1000,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		},
	}
	rate := cfg.Load * float64(cfg.Nodes) * 1000 / cfg.ServiceMs
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	var wg sync.WaitGroup
	var next atomic.Uint64
	pick := func() *nodeState {
		for k := 0; k < 4*cfg.Nodes; k++ {
			n := nodes[next.Add(1)%uint64(cfg.Nodes)]
			if n.inRotation.Load() {
				return n
			}
		}
		return nodes[next.Add(1)%uint64(cfg.Nodes)]
	}
	send := func() {
		defer wg.Done()
		for attempt := 0; attempt < cfg.Nodes; attempt++ {
			n := pick()
			start := time.Now()
			resp, err := hc.Get(fmt.Sprintf("http://%s/work?ms=%g", n.info.HTTP, cfg.ServiceMs))
			end := time.Now()
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				res.ByStatus[resp.StatusCode]++
				mu.Unlock()
				return
			}
			mu.Lock()
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				res.Retried++
				mu.Unlock()
				continue // never reached swd: safe to send elsewhere
			case isTimeout(err):
				res.Lost++
			case n.killedDuring(start, end.Add(time.Second)):
				res.DiedWithNode++
			default:
				res.ErrorsByCause[cause(err)]++
			}
			mu.Unlock()
			return
		}
		mu.Lock()
		res.ErrorsByCause["every node refused the connection"]++
		mu.Unlock()
	}

	// The killer: every KillEvery, SIGKILL one node and restart it after
	// DownFor.
	killerDone := make(chan struct{})
	stopKiller := make(chan struct{})
	go func() {
		defer close(killerDone)
		t := time.NewTicker(cfg.KillEvery)
		defer t.Stop()
		for k := 0; ; k++ {
			select {
			case <-stopKiller:
				return
			case <-t.C:
			}
			n := nodes[(k+1)%cfg.Nodes]
			n.inRotation.Store(false)
			n.mu.Lock()
			n.killedAt = append(n.killedAt, time.Now())
			n.mu.Unlock()
			if err := c.Kill(n.info.Name); err != nil {
				cfg.Logf("kill %s: %v", n.info.Name, err)
				continue
			}
			mu.Lock()
			res.Kills++
			mu.Unlock()
			cfg.Logf("killed %s", n.info.Name)
			time.Sleep(cfg.DownFor)
			if err := c.Restart(n.info.Name); err != nil {
				cfg.Logf("restart %s: %v", n.info.Name, err)
				continue
			}
			began := time.Now()
			if err := waitMembers(ctx, n.info.GRPC, cfg.Nodes, 30*time.Second); err != nil {
				cfg.Logf("%s did not rejoin: %v", n.info.Name, err)
				continue
			}
			heal := time.Since(began).Seconds()
			mu.Lock()
			res.HealSeconds = append(res.HealSeconds, float64(int(heal*100))/100)
			mu.Unlock()
			cfg.Logf("%s back after %.2fs", n.info.Name, heal)
			n.inRotation.Store(true)
		}
	}()

	start := time.Now()
	at := time.Duration(0)
	for at < cfg.Duration {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		select {
		case <-ctx.Done():
			at = cfg.Duration
			continue
		case <-time.After(time.Until(start.Add(at))):
		}
		res.Sent++
		wg.Add(1)
		go send()
	}
	close(stopKiller)
	<-killerDone
	wg.Wait()
	return res, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func cause(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset by peer", "EOF", "broken pipe", "connection refused"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

func waitMembers(ctx context.Context, addr string, want int, timeout time.Duration) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	cl := swdv1.NewControlClient(cc)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		// A short deadline: while the restarted process is not listening
		// yet, a call waits for the connection until its deadline, which
		// would otherwise dominate the measured time to heal.
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		s, err := cl.Status(cctx, &swdv1.StatusRequest{})
		cancel()
		if err == nil && int(s.GetMembers()) == want {
			known := 0
			for _, v := range s.GetView() {
				if v.GetKnown() {
					known++
				}
			}
			if known == want {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no full membership within %s", timeout)
}
