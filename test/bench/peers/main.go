// Command peers measures what a balancer costs a request when there is
// nothing to balance (the pass-through part of `make bench-peers`): one
// zero-time app (dummyapp, GET /work?ms=0) reached directly, through swd
// (policy none, m = --clients) and through each installed peer
// (internal/peers: HAProxy with maxconn m, nginx, Caddy), with the same
// client. For each it prints the latency at a fixed open-loop rate (p50,
// p99 and what the proxy adds over the app direct) and the most requests
// per second --clients concurrent clients get through (closed loop).
//
//	go run ./test/bench/peers --bin-dir bin [--rate 1000] [--duration 10s] [--clients 64]
//
// Client, proxies and app share this machine's cores: the figures compare
// the systems with each other on one machine, not with other machines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/peers"
	"github.com/swd-project/swd/loadgen"
)

// config is the benchmark's flags.
type config struct {
	binDir   string
	rate     int
	duration time.Duration
	warmup   time.Duration
	clients  int
	peers    []string
}

func (c config) validate() error {
	switch {
	case c.rate < 1:
		return fmt.Errorf("--rate must be at least 1, got %d", c.rate)
	case c.duration <= 0 || c.warmup < 0:
		return errors.New("--duration must be positive and --warmup not negative")
	case c.clients < 1:
		return fmt.Errorf("--clients must be at least 1, got %d", c.clients)
	}
	return nil
}

func main() {
	var c config
	var list string
	flag.StringVar(&c.binDir, "bin-dir", "bin", "directory holding swd and dummyapp (make build)")
	flag.IntVar(&c.rate, "rate", 1000, "open-loop rate of the latency runs (req/s)")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "length of each latency run and each throughput run")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up of each system at 200 req/s before it is measured")
	flag.IntVar(&c.clients, "clients", 64, "concurrent clients of the throughput runs; also swd's m and haproxy-cq's maxconn")
	flag.StringVar(&list, "peers", "haproxy-cq,nginx-leastconn,caddy-leastconn", "peers to measure (installed ones; the others are skipped with a message): "+strings.Join(peers.Names(), ", "))
	flag.Parse()
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.peers = append(c.peers, p)
		}
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench peers:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "bench peers:", err)
		os.Exit(1)
	}
}

// system is one way to reach the app.
type system struct {
	name string
	addr string
}

// result is what one system measured.
type result struct {
	latency    loadgen.Row
	throughput float64 // successful requests per second, closed loop
	thrSuccess float64 // fraction of the closed-loop requests answered 2xx
}

func run(ctx context.Context, c config) error {
	installed, skipped, err := loadgen.CheckPeers(c.peers)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintln(os.Stderr, "bench peers:", s)
	}
	lc := localcluster.DefaultConfig()
	lc.Nodes, lc.BinDir, lc.Policy, lc.Concurrency, lc.AppMode = 1, c.binDir, "none", c.clients, "sleep"
	cluster, err := localcluster.Start(ctx, lc)
	if err != nil {
		return err
	}
	defer cluster.Stop(20 * time.Second)
	app := cluster.Info.Nodes[0].App
	systems := []system{{"app direct", app}, {"swd", cluster.Info.Nodes[0].HTTP}}
	for _, name := range installed {
		p, err := peers.Lookup(name)
		if err != nil {
			return err
		}
		cfg := peers.DefaultConfig()
		cfg.Backends, cfg.Concurrency = []string{app}, c.clients
		pr, err := peers.Start(ctx, p, cfg)
		if err != nil {
			return err
		}
		defer pr.Stop()
		systems = append(systems, system{name, pr.Addr})
	}

	fmt.Printf("pass-through cost: a zero-time app (dummyapp, GET /work?ms=0) on loopback, reached directly and through each balancer;\n")
	fmt.Printf("%d cores shared by the client (vegeta), the balancer and the app; swd m = %d, haproxy-cq maxconn %d\n\n", runtime.NumCPU(), c.clients, c.clients)
	results := make([]result, len(systems))
	// One system at a time: latency, then throughput, so the others
	// sit idle while one is measured.
	for i, s := range systems {
		if c.warmup > 0 {
			if _, err := openLoop(ctx, s, 200, c.warmup); err != nil {
				return err
			}
		}
		if results[i].latency, err = openLoop(ctx, s, c.rate, c.duration); err != nil {
			return err
		}
		if results[i].throughput, results[i].thrSuccess, err = closedLoop(ctx, s, c.clients, c.duration); err != nil {
			return err
		}
	}
	direct := results[0].latency
	fmt.Printf("latency at %d req/s, %s per system (open loop; ms)\n", c.rate, c.duration)
	fmt.Printf("  %-18s %8s %8s %10s %10s %9s\n", "system", "p50", "p99", "adds p50", "adds p99", "success")
	for i, s := range systems {
		r := results[i].latency
		adds50, adds99 := "-", "-"
		if i > 0 {
			adds50, adds99 = fmt.Sprintf("%+.3f", r.P50Ms-direct.P50Ms), fmt.Sprintf("%+.3f", r.P99Ms-direct.P99Ms)
		}
		fmt.Printf("  %-18s %8.3f %8.3f %10s %10s %8.2f%%\n", s.name, r.P50Ms, r.P99Ms, adds50, adds99, 100*float64(r.Requests-r.Errors)/float64(max(1, r.Requests)))
	}
	fmt.Printf("\nthroughput: %d concurrent clients, closed loop, %s per system\n", c.clients, c.duration)
	fmt.Printf("  %-18s %10s %9s %12s\n", "system", "req/s", "success", "of direct")
	for i, s := range systems {
		r := results[i]
		fmt.Printf("  %-18s %10.0f %8.2f%% %11.0f%%\n", s.name, r.throughput, 100*r.thrSuccess, 100*r.throughput/results[0].throughput)
	}
	for _, s := range skipped {
		fmt.Printf("\n%s", s)
	}
	fmt.Println()
	return nil
}

// target is every request of the benchmark: zero service time.
func target(s system) vegeta.Targeter {
	return vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: "http://" + s.addr + "/work?ms=0"})
}

// openLoop offers rate req/s to s for d and summarises the response times
// with loadgen's percentiles.
func openLoop(ctx context.Context, s system, rate int, d time.Duration) (loadgen.Row, error) {
	atk := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second), vegeta.Connections(4096))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var ok []time.Duration
	n, failed := 0, 0
	for r := range atk.Attack(target(s), vegeta.Rate{Freq: rate, Per: time.Second}, d, s.name) {
		n++
		if r.Error != "" || r.Code < 200 || r.Code > 299 {
			failed++
			continue
		}
		ok = append(ok, r.Latency)
	}
	if len(ok) == 0 {
		return loadgen.Row{}, fmt.Errorf("%s answered none of %d requests", s.name, n)
	}
	return loadgen.Summarize(s.name, float64(rate), n, failed, ok), ctx.Err()
}

// closedLoop runs clients back-to-back clients against s for d and returns
// the successful requests per second and the success fraction.
func closedLoop(ctx context.Context, s system, clients int, d time.Duration) (float64, float64, error) {
	atk := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second), vegeta.Connections(4096),
		vegeta.Workers(uint64(clients)), vegeta.MaxWorkers(uint64(clients)))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	n, good := 0, 0
	start := time.Now()
	for r := range atk.Attack(target(s), vegeta.Rate{Freq: 0}, d, s.name) {
		n++
		if r.Error == "" && r.Code >= 200 && r.Code <= 299 {
			good++
		}
	}
	el := time.Since(start)
	if n == 0 {
		return 0, 0, fmt.Errorf("%s answered no request", s.name)
	}
	return float64(good) / el.Seconds(), float64(good) / float64(n), ctx.Err()
}
