// Command goodput (test/bench/goodput) measures congestion behaviour: for each policy, a local
// cluster is offered 1x, 2x and 5x its capacity, and the goodput (answers
// within the deadline per second) is printed with its ratio to goodput at
// 1x. Requests are 20 ms (sleep-mode apps, m = 1), so capacity is
// nodes x 50 req/s; rr and ct go through the dispatcher, the others are
// spread over the nodes round robin.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func main() {
	nodes := flag.Int("nodes", 4, "nodes")
	dur := flag.Duration("duration", 8*time.Second, "offered time per run")
	deadline := flag.Duration("deadline", time.Second, "an answer counts as good within this time")
	qt := flag.Duration("queue-timeout", 500*time.Millisecond, "swd --queue-timeout")
	policies := flag.String("policies", "rr,ct,ll,nu,nu-exact", "policies")
	binDir := flag.String("bin-dir", "bin", "directory holding swd, dummyapp")
	flag.Parse()
	if err := run(*nodes, *dur, *deadline, *qt, strings.Split(*policies, ","), *binDir); err != nil {
		fmt.Fprintln(os.Stderr, "bench/goodput:", err)
		os.Exit(1)
	}
}

func run(n int, dur, deadline, qt time.Duration, policies []string, binDir string) error {
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.BinDir, cfg.Dispatcher = n, binDir, true
	cfg.SwdArgs = []string{"--queue-timeout=" + qt.String()}
	c, err := localcluster.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer c.Stop(20 * time.Second)
	cc, err := grpc.NewClient(c.Info.Nodes[0].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctl := swdv1.NewControlClient(cc)
	capacity := float64(n) * 50
	fmt.Printf("goodput: %d nodes (m=1, 20 ms requests, capacity %.0f req/s), --queue-timeout %s, deadline %s, %s per run\n\n",
		n, capacity, qt, deadline, dur)
	fmt.Printf("%-9s %5s %8s %8s %8s %8s %10s %8s\n", "policy", "load", "offered", "200", "503", "other", "goodput/s", "vs 1x")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4000}}
	for _, pol := range policies {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ctl.SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: pol, Cluster: true})
		cancel()
		if err != nil {
			return fmt.Errorf("switch to %s: %w", pol, err)
		}
		targets := []string{c.Info.Dispatcher.HTTP}
		if pol != "rr" && pol != "ct" {
			targets = nil
			for _, nd := range c.Info.Nodes {
				targets = append(targets, nd.HTTP)
			}
		}
		var base float64
		for _, x := range []float64{1, 2, 5} {
			time.Sleep(time.Second)
			r := offer(hc, targets, x*capacity, dur, deadline)
			if x == 1 {
				base = r.goodput
			}
			fmt.Printf("%-9s %4.0fx %8d %8d %8d %8d %10.1f %7.0f%%\n", pol, x, r.sent, r.ok, r.unavailable, r.other, r.goodput, 100*r.goodput/base)
		}
	}
	return nil
}

type result struct {
	sent, ok, unavailable, other int64
	goodput                      float64
}

// offer sends Poisson arrivals at rate for dur, round robin over targets.
func offer(hc *http.Client, targets []string, rate float64, dur, deadline time.Duration) result {
	var r result
	var good atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at > dur {
			break
		}
		due := start.Add(at)
		time.Sleep(time.Until(due))
		r.sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get("http://" + targets[i%len(targets)] + "/work?ms=20")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				r.other++
				if os.Getenv("GOODPUT_DEBUG") != "" {
					fmt.Fprintln(os.Stderr, "error:", err)
				}
				return
			case resp.StatusCode == http.StatusOK:
				r.ok++
				if time.Since(due) <= deadline {
					good.Add(1)
				}
			case resp.StatusCode == http.StatusServiceUnavailable:
				r.unavailable++
			default:
				r.other++
				if os.Getenv("GOODPUT_DEBUG") != "" {
					b, _ := io.ReadAll(resp.Body)
					fmt.Fprintln(os.Stderr, "status:", resp.Status, strings.TrimSpace(string(b)))
				}
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}()
	}
	wg.Wait()
	r.goodput = float64(good.Load()) / dur.Seconds()
	return r
}
