// Command chaos runs the chaos experiment (`make chaos`): a local cluster
// under open-loop load while nodes are SIGKILLed and restarted. It prints
// requests sent, answers by status, errors by cause and lost requests, and
// exits 1 if any request was lost or a live node answered with an error.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/swd-project/swd/test/chaos"
)

func main() {
	cfg := chaos.DefaultConfig()
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes in the cluster")
	flag.StringVar(&cfg.Policy, "policy", cfg.Policy, "policy every node runs")
	flag.Float64Var(&cfg.Load, "load", cfg.Load, "offered load as a fraction of capacity")
	flag.Float64Var(&cfg.ServiceMs, "service-ms", cfg.ServiceMs, "service time of every request")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long load is offered")
	flag.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "one node is SIGKILLed this often")
	flag.DurationVar(&cfg.DownFor, "down-for", cfg.DownFor, "how long a killed node stays down")
	flag.StringVar(&cfg.BinDir, "bin-dir", "bin", "directory holding swd and dummyapp")
	flag.StringVar(&cfg.LogDir, "log-dir", "", "write each process's log here")
	flag.Parse()
	cfg.Logf = log.Printf
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("chaos: %d nodes (%s) at %.0f%% load for %s; one node SIGKILLed every %s, back after %s\n",
		cfg.Nodes, cfg.Policy, 100*cfg.Load, cfg.Duration, cfg.KillEvery, cfg.DownFor)
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	fmt.Print(res)
	var errs int64
	for _, n := range res.ErrorsByCause {
		errs += n
	}
	if res.Lost > 0 || errs > 0 {
		fmt.Println("FAIL: requests lost or failed at live nodes")
		os.Exit(1)
	}
	fmt.Println("OK: nothing lost")
}
