// Command proxy (test/bench/proxy) measures what swd adds in front of an application:
// latency (p50, p99) at a fixed open-loop rate against a zero-time app,
// compared with calling the app directly, and the most requests per second
// swd passes through with a large m. It runs everything in one process on
// loopback and prints the figures; `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/node"
)

func main() {
	rate := flag.Int("rate", 1000, "open-loop rate for the latency run (req/s)")
	dur := flag.Duration("duration", 10*time.Second, "length of each run")
	workers := flag.Int("workers", 64, "concurrent clients for the throughput run (and swd's m)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (load generator included) here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*rate, *dur, *workers); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench/proxy:", err)
		os.Exit(1)
	}
}

func run(rate int, dur time.Duration, workers int) error {
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})}
	go func() { _ = app.Serve(appLn) }()
	defer app.Close()
	appURL := "http://" + appLn.Addr().String()

	ports, err := localcluster.FreeAddrs(4)
	if err != nil {
		return err
	}
	cfg := node.DefaultConfig()
	cfg.NodeName = "bench-0"
	cfg.Listen, cfg.GRPC, cfg.Admin, cfg.Cluster.GossipAddr = ports[0], ports[1], ports[2], ports[3]
	cfg.Proxy.App = appURL
	cfg.Policy = "none"
	cfg.Queue.Concurrency = workers
	cfg.Queue.Limit = 100000
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return err
	}
	defer func() { _ = n.Shutdown(context.Background()) }()
	swdURL := "http://" + cfg.Listen

	fmt.Printf("swd proxy overhead: zero-time app, loopback, %d cores shared by load generator, swd and app\n\n", runtime.NumCPU())
	// Warm up connections and code paths.
	_, _ = attack(appURL, 200, 2*time.Second, 0)
	_, _ = attack(swdURL, 200, 2*time.Second, 0)

	direct, err := attack(appURL, rate, dur, 0)
	if err != nil {
		return err
	}
	via, err := attack(swdURL, rate, dur, 0)
	if err != nil {
		return err
	}
	fmt.Printf("latency at %d req/s for %s (open loop)\n", rate, dur)
	fmt.Printf("  %-14s %10s %10s %10s %8s\n", "", "p50", "p99", "max", "success")
	row := func(name string, m *vegeta.Metrics) {
		fmt.Printf("  %-14s %10s %10s %10s %7.2f%%\n", name, m.Latencies.P50.Round(time.Microsecond), m.Latencies.P99.Round(time.Microsecond),
			m.Latencies.Max.Round(time.Microsecond), m.Success*100)
	}
	row("app direct", direct)
	row("through swd", via)
	fmt.Printf("  %-14s %10s %10s\n\n", "swd adds", (via.Latencies.P50 - direct.Latencies.P50).Round(time.Microsecond),
		(via.Latencies.P99 - direct.Latencies.P99).Round(time.Microsecond))

	if err := transferHop(cfg, rate, dur); err != nil {
		return err
	}

	dthr, err := attack(appURL, 0, dur/2, workers)
	if err != nil {
		return err
	}
	sthr, err := attack(swdURL, 0, dur/2, workers)
	if err != nil {
		return err
	}
	fmt.Printf("throughput, %d concurrent clients, m=%d, %s each (closed loop)\n", workers, workers, dur/2)
	fmt.Printf("  app direct    %8.0f req/s  p50 %s\n", dthr.Throughput, dthr.Latencies.P50.Round(time.Microsecond))
	fmt.Printf("  through swd   %8.0f req/s  p50 %s  success %.2f%%\n", sthr.Throughput, sthr.Latencies.P50.Round(time.Microsecond), sthr.Success*100)
	return nil
}

// attack runs vegeta against url: at rate req/s, or with rate 0 as fast as
// `workers` concurrent clients go.
func attack(url string, rate int, dur time.Duration, workers int) (*vegeta.Metrics, error) {
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url + "/work"})
	opts := []func(*vegeta.Attacker){vegeta.KeepAlive(true), vegeta.Timeout(10 * time.Second), vegeta.Connections(10000)}
	var pacer vegeta.Pacer = vegeta.Rate{Freq: rate, Per: time.Second}
	if rate == 0 {
		opts = append(opts, vegeta.Workers(uint64(workers)), vegeta.MaxWorkers(uint64(workers)))
		pacer = vegeta.Rate{Freq: 0}
	}
	a := vegeta.NewAttacker(opts...)
	var m vegeta.Metrics
	for res := range a.Attack(tr, pacer, dur, "bench") {
		m.Add(res)
	}
	m.Close()
	if m.Requests == 0 {
		return nil, fmt.Errorf("no request completed against %s", url)
	}
	return &m, nil
}

// transferHop measures the cost of one transfer: the same zero-time app
// reached directly through its node, and through a dispatcher, which moves
// every request to the node over gRPC with the very code a node-to-node
// transfer uses (transfer.Client.Forward → Server.Forward →
// proxy.ServeTransferred).
func transferHop(nodeCfg node.Config, rate int, dur time.Duration) error {
	ports, err := localcluster.FreeAddrs(4)
	if err != nil {
		return err
	}
	cfg := node.DefaultConfig()
	cfg.Role = cluster.RoleDispatcher
	cfg.NodeName = "bench-dispatcher"
	cfg.Listen, cfg.GRPC, cfg.Admin, cfg.Cluster.GossipAddr = ports[0], ports[1], ports[2], ports[3]
	cfg.Cluster.Join = []string{nodeCfg.Cluster.GossipAddr}
	cfg.Policy = "rr"
	cfg.Logger = nodeCfg.Logger
	d, err := node.New(cfg)
	if err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		return err
	}
	defer func() { _ = d.Shutdown(context.Background()) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := d.Cluster().View()
		if len(v.Nodes) == 1 && v.Nodes[0].Known {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dispatcher never saw the node")
		}
		time.Sleep(20 * time.Millisecond)
	}
	nodeURL, dispURL := "http://"+nodeCfg.Listen, "http://"+cfg.Listen
	_, _ = attack(dispURL, 200, 2*time.Second, 0)
	local, err := attack(nodeURL, rate, dur, 0)
	if err != nil {
		return err
	}
	moved, err := attack(dispURL, rate, dur, 0)
	if err != nil {
		return err
	}
	fmt.Printf("one transfer hop at %d req/s for %s (open loop)\n", rate, dur)
	fmt.Printf("  %-20s %10s %10s %8s\n", "", "p50", "p99", "success")
	fmt.Printf("  %-20s %10s %10s %7.2f%%\n", "local (node)", local.Latencies.P50.Round(time.Microsecond), local.Latencies.P99.Round(time.Microsecond), local.Success*100)
	fmt.Printf("  %-20s %10s %10s %7.2f%%\n", "transferred (gRPC)", moved.Latencies.P50.Round(time.Microsecond), moved.Latencies.P99.Round(time.Microsecond), moved.Success*100)
	fmt.Printf("  %-20s %10s %10s\n\n", "transfer adds", (moved.Latencies.P50 - local.Latencies.P50).Round(time.Microsecond),
		(moved.Latencies.P99 - local.Latencies.P99).Round(time.Microsecond))
	return nil
}
