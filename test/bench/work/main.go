// Command work (test/bench/work) measures the work load index on a real
// loopback cluster: the mixed workload (90 % light 10 ms, 10 % heavy
// 310 ms, each class on its own route) at 80 % load on 8 nodes (m = 1,
// sleep-mode dummyapps), the same requests under swd --load-index count
// and --load-index work, for each transfer policy, in alternating rounds
// (count, work, count, work, ...) so that drift on the shared machine hits
// both alike. It prints every run and the p99 ratio work / count per
// policy, then what each node learnt of each route's cost against the
// truth. `make bench-work` runs it; take the measurement lock
// (flock /tmp/swd-measure.lock) around it on a shared machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/workload"
	"github.com/swd-project/swd/loadgen"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func main() {
	nodes := flag.Int("nodes", 8, "nodes in the local cluster")
	dur := flag.Duration("duration", 60*time.Second, "measured time per run")
	warm := flag.Duration("warmup", 20*time.Second, "warm-up per run (sent, not measured; the nodes learn the costs meanwhile)")
	rounds := flag.Int("rounds", 2, "rounds of count then work")
	load := flag.Float64("load", 0.8, "offered load per slot")
	wl := flag.String("workload", "mixed", "workload (mixed, or one of the paper's: standard, dispersed, burst)")
	scale := flag.Float64("scale", 1, "request size scale")
	binDir := flag.String("bin-dir", "bin", "directory holding swd and dummyapp")
	policies := flag.String("policies", "nu,nu-exact", "transfer policies to measure")
	seed := flag.Uint64("seed", 1, "workload seed (the same requests in every run)")
	flag.Parse()
	if err := run(*nodes, *dur, *warm, *rounds, *load, *wl, *scale, *binDir, strings.Split(*policies, ","), *seed); err != nil {
		fmt.Fprintln(os.Stderr, "bench/work:", err)
		os.Exit(1)
	}
}

type key struct{ policy, index string }

func run(n int, dur, warm time.Duration, rounds int, load float64, wl string, scale float64, binDir string, policies []string, seed uint64) error {
	spec, err := workload.Lookup(wl)
	if err != nil {
		return err
	}
	spec.Scale = scale
	rate := load * float64(n) * 1000 / spec.MeanServiceMs()
	fmt.Printf("work load index on a real cluster: %d nodes (m = 1, sleep-mode apps), %s, %.0f req/s (%.0f %% load), seed %d, %s measured after %s warm-up per run\n",
		n, spec, rate, load*100, seed, dur, warm)
	fmt.Printf("shared 2-core machine: other builds may run meanwhile; rounds alternate count and work\n\n")
	fmt.Printf("%-5s %-9s %-5s %8s %7s %9s %9s %9s %9s %9s\n", "round", "policy", "index", "requests", "errors", "mean ms", "p50 ms", "p95 ms", "p99 ms", "p99.5 ms")
	p99 := map[key][]float64{}
	var learnt []string
	for r := 1; r <= rounds; r++ {
		for _, idx := range []string{"count", "work"} {
			lines, err := cluster(n, binDir, idx, policies, spec, rate, warm, dur, seed, func(pol string, row loadgen.Row) {
				fmt.Printf("%-5d %-9s %-5s %8d %7d %9.1f %9.1f %9.1f %9.1f %9.1f\n", r, pol, idx, row.Requests, row.Errors,
					row.MeanMs, row.P50Ms, row.P95Ms, row.P99Ms, row.P995Ms)
				p99[key{pol, idx}] = append(p99[key{pol, idx}], row.P99Ms)
			})
			if err != nil {
				return err
			}
			if idx == "work" {
				learnt = append(learnt, fmt.Sprintf("round %d:", r))
				learnt = append(learnt, lines...)
			}
		}
	}
	fmt.Printf("\np99 work / count, per round and of the rounds' means\n")
	for _, pol := range policies {
		c, w := p99[key{pol, "count"}], p99[key{pol, "work"}]
		var per []string
		for i := range min(len(c), len(w)) {
			per = append(per, fmt.Sprintf("%.3f", w[i]/c[i]))
		}
		fmt.Printf("  %-9s count %s ms, work %s ms: %s (means %.3f)\n", pol, list(c), list(w), strings.Join(per, ", "), mean(w)/mean(c))
	}
	fmt.Printf("\nlearnt cost per route under --load-index work, after each round (every node; true mean in brackets)\n")
	for _, l := range learnt {
		fmt.Println("  " + l)
	}
	return nil
}

// cluster starts a cluster running load index idx, measures every policy
// on it (row is called for each) and returns what the nodes learnt.
func cluster(n int, binDir, idx string, policies []string, spec workload.Spec, rate float64, warm, dur time.Duration, seed uint64,
	row func(string, loadgen.Row)) ([]string, error) {
	ctx := context.Background()
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.BinDir, cfg.Policy, cfg.ReadyTimeout = n, binDir, policies[0], 60*time.Second
	cfg.SwdArgs = []string{"--load-index=" + idx}
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Stop(20 * time.Second)
	clients := make([]swdv1.ControlClient, n)
	targets := make([]string, n)
	for i, nd := range c.Info.Nodes {
		cc, err := grpc.NewClient(nd.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		clients[i] = swdv1.NewControlClient(cc)
		targets[i] = nd.HTTP
	}
	for _, pol := range policies {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := clients[0].SetPolicy(cctx, &swdv1.SetPolicyRequest{Name: pol, Cluster: true})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("switch to %s: %w", pol, err)
		}
		time.Sleep(time.Second)
		rc := loadgen.DefaultRunConfig()
		rc.Policy, rc.Targets, rc.Workload, rc.Rate, rc.Seed = pol, targets, spec, rate, seed
		rc.Warmup, rc.Duration = warm, dur
		res, err := loadgen.Run(ctx, rc)
		if err != nil {
			return nil, err
		}
		row(pol, res.Row)
		time.Sleep(2 * time.Second) // let the queues drain
	}
	truth := map[string]float64{}
	for _, cl := range spec.Classes {
		truth["GET /work/"+cl.Name] = cl.MeanMs * spec.Scale
	}
	if len(spec.Classes) == 0 {
		truth["GET /work"] = spec.MeanServiceMs()
	}
	names := make([]string, 0, len(truth))
	for k := range truth {
		names = append(names, k)
	}
	slices.Sort(names)
	var lines []string
	for _, route := range names {
		var vals []string
		worst := 0.0
		for i, cl := range clients {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err := cl.Status(cctx, &swdv1.StatusRequest{})
			cancel()
			if err != nil {
				return nil, err
			}
			for _, r := range s.GetRoutes() {
				if r.GetName() == route {
					v := r.GetCostSeconds() * 1000
					vals = append(vals, fmt.Sprintf("%d:%.2f(%d)", i, v, r.GetSamples()))
					worst = max(worst, math.Abs(v-truth[route])/truth[route])
				}
			}
		}
		lines = append(lines, fmt.Sprintf("%s [%.4g ms]: worst error %.1f %%; node:ms(samples) %s", route, truth[route], worst*100, strings.Join(vals, " ")))
	}
	return lines, nil
}

func list(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.1f", x))
	}
	return strings.Join(s, "/")
}

func mean(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}
