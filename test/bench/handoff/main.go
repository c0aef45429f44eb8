// Command handoff (test/bench/handoff, `make bench-handoff`) measures what
// moving a request costs on loopback, by body size, and what the
// transfer-cost rule changes on a real cluster (issue 22, paper 002).
//
// Part 1, hand-off cost: two nodes under nu (m = 1, sleep-mode apps); node-0
// alone gets requests (20 ms each, 70/s: more than its 50/s), so nu moves
// the excess to node-1. Phases alternate small (200-byte) and 1 MiB bodies,
// the same pattern for both; the figures are node-0's
// swd_transfer_handoff_seconds (decision to the peer's queue, as node-0
// learns it) per size class over the phases of that size: mean, and p50 and
// p99 interpolated within the histogram's buckets. Then, for bodies above
// --max-transfer-body (spooled, moved by Transfer.ForwardStream; default 4
// and 16 MiB), the same with fewer, longer requests (200 ms, 7/s: more
// than node-0's 5/s), so the bodies' bytes stay within what loopback and
// the spool disk carry; both sizes fall in the "larger" class, so each
// phase's difference of that class is its size's.
//
// Part 2, the rule on a real cluster: four nodes under nu; clients call
// node-0 and node-1 only, with short requests (exponential, mean 5 ms) of
// which a share carry 1 MiB bodies; the same requests (same seed) run once
// with --transfer-cost off and once with measured. It prints the clients'
// response times, the transfers and the body bytes moved.
//
// The machine is shared: other processes (builds, tests) run meanwhile, so
// compare figures of one run with each other, not across runs.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/metrics"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding swd and dummyapp")
	phase := flag.Duration("phase", 8*time.Second, "part 1: length of each body-size phase")
	rounds := flag.Int("rounds", 2, "part 1: phases of each size (alternating)")
	dur := flag.Duration("duration", 20*time.Second, "part 2: measured time of each run")
	rate := flag.Float64("rate", 300, "part 2: requests per second, spread over node-0 and node-1")
	share := flag.Float64("large-share", 0.2, "part 2: share of requests with a 1 MiB body")
	meanMs := flag.Float64("mean-ms", 5, "part 2: mean service time (exponential)")
	part := flag.String("part", "1,2", "which parts to run")
	spooledFlag := flag.String("spooled", "4,16", "part 1: spooled body sizes in MiB (above --max-transfer-body, 1 MiB), comma-separated; empty for none")
	flag.Parse()
	for _, f := range strings.Split(*spooledFlag, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		mib, err := strconv.Atoi(f)
		if err != nil || mib < 2 || mib > 60 {
			fmt.Fprintf(os.Stderr, "bench/handoff: --spooled %q: sizes are whole MiB from 2 to 60\n", f)
			os.Exit(2)
		}
		spooled = append(spooled, mib<<20)
	}
	payload = bytes.Repeat([]byte("x"), max(1<<20, slices.Max(append([]int{0}, spooled...))))
	if err := run(*binDir, *phase, *rounds, *dur, *rate, *share, *meanMs, *part); err != nil {
		fmt.Fprintln(os.Stderr, "bench/handoff:", err)
		os.Exit(1)
	}
}

// spooled holds the spooled body sizes of part 1; payload the bytes every
// request body is cut from (read only once the offers run).
var (
	spooled []int
	payload []byte
)

func run(binDir string, phase time.Duration, rounds int, dur time.Duration, rate, share, meanMs float64, part string) error {
	if strings.Contains(part, "1") {
		if err := handoffCost(binDir, phase, rounds); err != nil {
			return err
		}
	}
	if strings.Contains(part, "2") {
		return ruleEffect(binDir, dur, rate, share, meanMs)
	}
	return nil
}

// hist is one series of swd_transfer_handoff_seconds.
type hist struct {
	bounds []float64
	counts []uint64 // cumulative, the last one +Inf
	sum    float64
}

func (h hist) minus(o hist) metrics.Histogram {
	out := metrics.Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: h.sum - o.sum}
	for i := range h.counts {
		out.Counts[i] = h.counts[i]
		if i < len(o.counts) {
			out.Counts[i] -= o.counts[i]
		}
	}
	out.Count = out.Counts[len(out.Counts)-1]
	return out
}

// scrape reads a node's /metrics families.
func scrape(admin string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(resp.Body)
}

// handoffHists returns node admin's hand-off histogram per size class.
func handoffHists(admin string) (map[string]hist, error) {
	mfs, err := scrape(admin)
	if err != nil {
		return nil, err
	}
	out := map[string]hist{}
	mf, ok := mfs["swd_transfer_handoff_seconds"]
	if !ok {
		return nil, fmt.Errorf("%s exports no swd_transfer_handoff_seconds", admin)
	}
	for _, m := range mf.GetMetric() {
		var size string
		for _, l := range m.GetLabel() {
			if l.GetName() == "size" {
				size = l.GetValue()
			}
		}
		h := hist{sum: m.GetHistogram().GetSampleSum()}
		for _, b := range m.GetHistogram().GetBucket() {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.counts = append(h.counts, b.GetCumulativeCount())
		}
		h.bounds = append(h.bounds, math.Inf(1))
		h.counts = append(h.counts, m.GetHistogram().GetSampleCount())
		out[size] = h
	}
	return out, nil
}

// counter sums a counter family's series on admin whose labels include
// every pair in match.
func counter(admin, family string, match map[string]string) (float64, error) {
	mfs, err := scrape(admin)
	if err != nil {
		return 0, err
	}
	mf, ok := mfs[family]
	if !ok {
		return 0, nil
	}
	total := 0.0
	for _, m := range mf.GetMetric() {
		ok := true
		for k, v := range match {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			ok = ok && found
		}
		if ok {
			total += m.GetCounter().GetValue()
		}
	}
	return total, nil
}

// offer sends requests to targets (in turn) for d: open loop, Poisson at
// rate, each /work?ms=<size()> with a body of body() bytes. It returns the
// response times of the requests answered 200.
func offer(targets []string, rate float64, d time.Duration, seed uint64, size func(*rand.Rand) float64, body func(*rand.Rand) int) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 22))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var rts []time.Duration
	start := time.Now()
	next := start
	for i := 0; ; i++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if next.Sub(start) > d {
			break
		}
		time.Sleep(time.Until(next))
		ms, n := size(rng), body(rng)
		target := targets[i%len(targets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, "http://"+target+"/work?ms="+strconv.FormatFloat(ms, 'f', 3, 64), bytes.NewReader(payload[:n]))
			if err != nil {
				return
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				mu.Lock()
				rts = append(rts, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return rts
}

func start(binDir string, nodes int, args ...string) (*localcluster.Cluster, error) {
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.BinDir, cfg.Policy, cfg.Concurrency = nodes, binDir, "nu", 1
	cfg.SwdArgs = args
	return localcluster.Start(context.Background(), cfg)
}

func handoffCost(binDir string, phase time.Duration, rounds int) error {
	c, err := start(binDir, 2)
	if err != nil {
		return err
	}
	defer c.Stop(20 * time.Second)
	n0 := c.Info.Nodes[0]
	fmt.Printf("hand-off cost on loopback: 2 nodes under nu (m = 1), node-0 offered 70 req/s of 20 ms requests (it serves 50/s);\n"+
		"%d phases of %s per body size, alternating; node-0's swd_transfer_handoff_seconds (decision to the peer's queue)\n\n", rounds, phase)
	type phaseKind struct {
		name, class string
		bytes       int
		rate, ms    float64
	}
	kinds := []phaseKind{{"200 bytes", string(metrics.Size4KiB), 200, 70, 20}, {"1 MiB", string(metrics.Size1MiB), 1 << 20, 70, 20}}
	for _, n := range spooled {
		kinds = append(kinds, phaseKind{fmt.Sprintf("%d MiB (spooled)", n>>20), string(metrics.SizeLarger), n, 7, 200})
	}
	sum := map[string]metrics.Histogram{}
	for r := 0; r < rounds; r++ {
		for _, b := range kinds {
			before, err := handoffHists(n0.Admin)
			if err != nil {
				return err
			}
			offer([]string{n0.HTTP}, b.rate, phase, uint64(r), func(*rand.Rand) float64 { return b.ms }, func(*rand.Rand) int { return b.bytes })
			after, err := handoffHists(n0.Admin)
			if err != nil {
				return err
			}
			d := after[b.class].minus(before[b.class])
			acc := sum[b.name]
			if acc.Counts == nil {
				acc = d
			} else {
				for i := range acc.Counts {
					acc.Counts[i] += d.Counts[i]
				}
				acc.Count += d.Count
				acc.Sum += d.Sum
			}
			sum[b.name] = acc
			time.Sleep(2 * time.Second) // let the queue drain between phases
		}
	}
	fmt.Printf("%-22s %10s %10s %10s %10s\n", "request body", "hand-offs", "mean ms", "p50 ms", "p99 ms")
	for _, row := range kinds {
		h := sum[row.name]
		if h.Count == 0 {
			fmt.Printf("%-22s %10d %10s %10s %10s\n", row.name, 0, "-", "-", "-")
			continue
		}
		fmt.Printf("%-22s %10d %10.2f %10.2f %10.2f\n", row.name, h.Count, h.Sum/float64(h.Count)*1e3,
			h.Quantile(0.5, metrics.Histogram{})*1e3, h.Quantile(0.99, metrics.Histogram{})*1e3)
	}
	fmt.Println("(p50/p99 interpolated within the histogram's buckets, x4 apart from 0.5 ms, the last at 2 s; the mean is exact)")
	if len(spooled) > 0 {
		fmt.Println("(spooled bodies: 7 req/s of 200 ms requests instead of 70 of 20 ms; they move by Transfer.ForwardStream)")
	}
	fmt.Println()
	return nil
}

func ruleEffect(binDir string, dur time.Duration, rate, share, meanMs float64) error {
	fmt.Printf("transfer-cost rule on a real cluster: 4 nodes under nu (m = 1); %.0f req/s to node-0 and node-1 only,\n"+
		"exponential sizes (mean %.1f ms), %.0f %% with 1 MiB bodies (the rest 200 bytes); %s per run, same requests\n\n", rate, meanMs, share*100, dur)
	fmt.Printf("%-14s %8s %9s %9s %9s %12s %14s %12s\n", "--transfer-cost", "answered", "mean ms", "p50 ms", "p99 ms", "transfers/s", "moved MiB/s", "1MiB moves/s")
	for _, mode := range []string{"off", "measured"} {
		c, err := start(binDir, 4, "--transfer-cost="+mode)
		if err != nil {
			return err
		}
		targets := []string{c.Info.Nodes[0].HTTP, c.Info.Nodes[1].HTTP}
		size := func(r *rand.Rand) float64 { return r.ExpFloat64() * meanMs }
		body := func(r *rand.Rand) int {
			if r.Float64() < share {
				return 1 << 20
			}
			return 200
		}
		// Warm-up: the node learns its service time and hand-off costs.
		offer(targets, rate, 5*time.Second, 99, size, body)
		time.Sleep(time.Second)
		read := func() (xfers, bytesOut, large float64, err error) {
			for _, n := range c.Info.Nodes {
				x, err := counter(n.Admin, "swd_transfers_total", map[string]string{"direction": "out", "outcome": "ok"})
				if err != nil {
					return 0, 0, 0, err
				}
				b, err := counter(n.Admin, "swd_transfer_bytes_total", map[string]string{"direction": "out", "body": "request"})
				if err != nil {
					return 0, 0, 0, err
				}
				hs, err := handoffHists(n.Admin)
				if err != nil {
					return 0, 0, 0, err
				}
				xfers, bytesOut, large = xfers+x, bytesOut+b, large+float64(hs[string(metrics.Size1MiB)].counts[len(hs[string(metrics.Size1MiB)].counts)-1])
			}
			return xfers, bytesOut, large, nil
		}
		x0, b0, l0, err := read()
		if err != nil {
			c.Stop(20 * time.Second)
			return err
		}
		rts := offer(targets, rate, dur, 1, size, body)
		x1, b1, l1, err := read()
		c.Stop(20 * time.Second)
		if err != nil {
			return err
		}
		sort.Slice(rts, func(i, j int) bool { return rts[i] < rts[j] })
		mean := 0.0
		for _, d := range rts {
			mean += float64(d)
		}
		if len(rts) > 0 {
			mean /= float64(len(rts))
		}
		pct := func(p float64) float64 {
			if len(rts) == 0 {
				return math.NaN()
			}
			return float64(rts[int(math.Ceil(p*float64(len(rts))))-1]) / 1e6
		}
		secs := dur.Seconds()
		fmt.Printf("%-14s %8d %9.2f %9.2f %9.2f %12.1f %14.1f %12.1f\n", mode, len(rts), mean/1e6, pct(0.5), pct(0.99),
			(x1-x0)/secs, (b1-b0)/secs/(1<<20), (l1-l0)/secs)
	}
	return nil
}
