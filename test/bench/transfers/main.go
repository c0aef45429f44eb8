// Command transfers (test/bench/transfers) measures what moving requests costs: how many
// transfers each transfer policy makes per request at 50 % and 90 % load on
// a local cluster (real processes), next to the simulator's figure for the
// same setup. It prints one table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/sim"
	"github.com/swd-project/swd/internal/workload"
	"github.com/swd-project/swd/loadgen"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func main() {
	nodes := flag.Int("nodes", 8, "nodes in the local cluster")
	dur := flag.Duration("duration", 20*time.Second, "measured time per run")
	binDir := flag.String("bin-dir", "bin", "directory holding swd, dummyapp")
	scale := flag.Float64("scale", 0.5, "request size scale (standard workload, mean 40 ms x scale)")
	placement := flag.String("placement", "arrival", "swd --placement: where a transferred request lands (arrival or tail)")
	policies := flag.String("policies", "ll,nu,nu-exact", "transfer policies to measure")
	flag.Parse()
	if err := run(*nodes, *dur, *binDir, *scale, *placement, strings.Split(*policies, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "bench/transfers:", err)
		os.Exit(1)
	}
}

func run(n int, dur time.Duration, binDir string, scale float64, placement string, policies []string) error {
	ctx := context.Background()
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.BinDir, cfg.Policy = n, binDir, "nu"
	cfg.SwdArgs = []string{"--placement=" + placement}
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Stop(20 * time.Second)
	clients := make([]swdv1.ControlClient, n)
	targets := make([]string, n)
	for i, nd := range c.Info.Nodes {
		cc, err := grpc.NewClient(nd.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		clients[i] = swdv1.NewControlClient(cc)
		targets[i] = nd.HTTP
	}
	spec, _ := workload.Lookup("standard")
	spec.Scale = scale
	capacity := float64(n) * 1000 / spec.MeanServiceMs()
	fmt.Printf("transfers per request: %d nodes (m=1), standard workload x%.2g (mean %.0f ms), capacity %.0f req/s, %s per run, --placement %s\n\n",
		n, scale, spec.MeanServiceMs(), capacity, dur, placement)
	fmt.Printf("%-9s %5s %9s %9s %10s %10s %9s %9s %9s %9s\n", "policy", "load", "requests", "transfers", "per req", "sim", "mean ms", "p99 ms",
		"pulls/req", "miss/req")
	for _, pol := range policies {
		ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := clients[0].SetPolicy(ctx2, &swdv1.SetPolicyRequest{Name: pol, Cluster: true})
		cancel()
		if err != nil {
			return fmt.Errorf("switch to %s: %w", pol, err)
		}
		for _, load := range []float64{0.5, 0.9} {
			time.Sleep(time.Second)
			before, pb, err := transfers(ctx, clients)
			if err != nil {
				return err
			}
			rc := loadgen.DefaultRunConfig()
			rc.Policy, rc.Targets, rc.Workload, rc.Rate = pol, targets, spec, load*capacity
			rc.Warmup, rc.Duration = 0, dur
			res, err := loadgen.Run(ctx, rc)
			if err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond) // let the last answers land
			after, pa, err := transfers(ctx, clients)
			if err != nil {
				return err
			}
			sc := sim.DefaultConfig()
			sc.Nodes, sc.Policy, sc.Workload, sc.Rate = n, pol, spec, load*capacity
			sc.Duration, sc.Warmup = 200*time.Second, 20*time.Second
			sr, err := sim.Run(sc)
			if err != nil {
				return err
			}
			fmt.Printf("%-9s %4.0f%% %9d %9d %10.3f %10.3f %9.1f %9.1f %9.3f %9.3f\n", pol, load*100, res.Sent, after-before,
				float64(after-before)/float64(res.Sent), sr.TransfersPerRequest, res.Row.MeanMs, res.Row.P99Ms,
				float64(pa.calls-pb.calls)/float64(res.Sent), float64(pa.misses-pb.misses)/float64(res.Sent))
		}
	}
	return nil
}

// pullCount is the Transfer.Pull calls the nodes made (steal), and how
// many of them missed.
type pullCount struct{ calls, misses uint64 }

// transfers sums successful outgoing transfers (pushes and pulled
// requests alike: both leave their origin on Forward) and pull calls over
// every node.
func transfers(ctx context.Context, clients []swdv1.ControlClient) (uint64, pullCount, error) {
	var total uint64
	var pc pullCount
	for _, cl := range clients {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := cl.Status(cctx, &swdv1.StatusRequest{})
		cancel()
		if err != nil {
			return 0, pc, err
		}
		for k, v := range s.GetCounters() {
			switch {
			case strings.HasPrefix(k, "transfers/out/ok/"):
				total += v
			case strings.HasPrefix(k, "pulls/"):
				pc.calls += v
				if k == "pulls/miss" {
					pc.misses += v
				}
			}
		}
	}
	return total, pc, nil
}
