//go:build unix

// Command gossip (test/bench/gossip) measures SWD's load gossip: it starts N cluster
// members in this process on loopback (free ports), lets them settle, then
// for a measurement window samples every member's View at random moments
// and reports the age of peers' entries (p50, p99, max), the gossip bytes/s
// and packets/s each member sends, and the CPU each member costs (this
// process's CPU time from getrusage, divided by N). Optionally it then kills
// one member (Shutdown without Leave) and makes another leave, and reports
// how long the others take to notice.
//
//	go run ./test/bench/gossip -nodes 16,32,64 -mechanism direct,piggyback
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/swd-project/swd/internal/cluster"
)

func main() {
	var (
		nodesFlag = flag.String("nodes", "16", "comma-separated cluster sizes to run")
		mechFlag  = flag.String("mechanism", "direct", "comma-separated mechanisms: direct, piggyback")
		interval  = flag.Duration("interval", 20*time.Millisecond, "gossip interval")
		fanout    = flag.Int("fanout", 3, "piggyback fanout")
		settle    = flag.Duration("settle", 3*time.Second, "time to let the cluster settle after it converged")
		window    = flag.Duration("duration", 10*time.Second, "measurement window")
		sample    = flag.Duration("sample", 50*time.Millisecond, "mean time between view samples")
		failures  = flag.Bool("failures", true, "also measure kill and leave detection")
		verbose   = flag.Bool("v", false, "log cluster events to stderr")
		encrypt   = flag.Bool("encrypt", false, "encrypt gossip with a 32-byte key (disables the unencrypted fast path)")
		cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	)
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench/gossip: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench/gossip: %v\n", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("# %d CPUs, load average %s\n", runtime.NumCPU(), loadAvg())
	fmt.Printf("%-9s %4s %9s %9s %9s %8s %10s %10s %9s %9s %10s %10s\n",
		"mechanism", "n", "age_p50", "age_p99", "age_max", "unknown", "bytes/s", "pkts/s", "payload/s", "cpu/node", "kill_gone", "leave_gone")
	for _, mech := range strings.Split(*mechFlag, ",") {
		for _, ns := range strings.Split(*nodesFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(ns))
			if err != nil || n < 2 {
				fmt.Fprintf(os.Stderr, "bench/gossip: bad cluster size %q\n", ns)
				os.Exit(2)
			}
			res, err := run(params{
				n: n, mech: strings.TrimSpace(mech), interval: *interval, fanout: *fanout,
				settle: *settle, window: *window, sample: *sample, failures: *failures, verbose: *verbose, encrypt: *encrypt,
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench/gossip: %s n=%d: %v\n", mech, n, err)
				pprof.StopCPUProfile()
				os.Exit(1)
			}
			fmt.Printf("%-9s %4d %9s %9s %9s %7.3f%% %10.0f %10.0f %9.0f %8.2f%% %10s %10s\n",
				res.mech, res.n, fmtDur(res.p50), fmtDur(res.p99), fmtDur(res.max), 100*res.unknown,
				res.bytesPerSec, res.pktsPerSec, res.payloadPerSec, 100*res.cpuPerNode, fmtDur(res.killGone), fmtDur(res.leaveGone))
		}
	}
}

type params struct {
	n                        int
	mech                     string
	interval, settle, window time.Duration
	sample                   time.Duration
	fanout                   int
	failures, verbose        bool
	encrypt                  bool
}

type result struct {
	mech                                   string
	n                                      int
	p50, p99, max                          time.Duration
	unknown                                float64 // fraction of peer entries not Known
	bytesPerSec, pktsPerSec, payloadPerSec float64 // per member
	cpuPerNode                             float64 // cores
	killGone, leaveGone                    time.Duration
}

// fakeLocal is a member's queue: a load that changes now and then.
type fakeLocal struct{ load atomic.Int64 }

func (f *fakeLocal) Load() int        { return int(f.load.Load()) }
func (f *fakeLocal) Concurrency() int { return 1 }

// Extras: the members gossip no extension field (the paper's entry alone).
func (f *fakeLocal) Extras() cluster.Extras { return cluster.Extras{} }
func (f *fakeLocal) Policy() cluster.PolicyStamp {
	return cluster.PolicyStamp{Name: "nu", Epoch: 1, ActivationInterval: 40 * time.Millisecond}
}

func run(p params) (result, error) {
	res := result{mech: p.mech, n: p.n}
	logger := slog.New(slog.DiscardHandler)
	if p.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	locals := make([]*fakeLocal, p.n)
	members := make([]*cluster.Cluster, p.n)
	defer func() {
		for _, c := range members {
			if c != nil {
				_ = c.Shutdown()
			}
		}
	}()
	var seeds []string
	for i := range p.n {
		cfg := cluster.DefaultConfig()
		cfg.NodeName = fmt.Sprintf("node-%02d", i)
		cfg.GossipAddr = "127.0.0.1:0"
		cfg.GossipInterval = p.interval
		cfg.Mechanism = p.mech
		cfg.Fanout = p.fanout
		cfg.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", 17000+i)
		cfg.Join = seeds
		cfg.Logger = logger
		if p.encrypt {
			cfg.GossipKey = []byte("gossipbench-key-0123456789abcdef")
		}
		locals[i] = &fakeLocal{}
		c, err := cluster.New(cfg, locals[i])
		if err != nil {
			return res, err
		}
		members[i] = c
		if len(seeds) < 3 {
			seeds = append(seeds, c.GossipAddr())
		}
	}
	stopLoad := make(chan struct{})
	defer close(stopLoad)
	go func() { // loads change every few ms, like a busy cluster's
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopLoad:
				return
			case <-t.C:
				locals[rand.IntN(p.n)].load.Store(rand.Int64N(20))
			}
		}
	}()

	// Converge: every member sees n members and every peer entry Known.
	deadline := time.Now().Add(60 * time.Second)
	for !converged(members, p.n) {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "bench/gossip: %s n=%d: views not all complete and known after 60s; measuring anyway\n", p.mech, p.n)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(p.settle)

	// Measure.
	before := make([]cluster.Stats, p.n)
	for i, c := range members {
		before[i] = c.Stats()
	}
	cpu0, wall0 := cpuTime(), time.Now()
	var ages []time.Duration
	unknown, total := 0, 0
	for end := wall0.Add(p.window); time.Now().Before(end); {
		time.Sleep(p.sample/2 + rand.N(p.sample))
		for _, c := range members {
			v := c.View()
			for i, nl := range v.Nodes {
				if i == v.Self {
					continue
				}
				total++
				if !nl.Known {
					unknown++
				}
				ages = append(ages, nl.Age)
			}
		}
	}
	wall := time.Since(wall0).Seconds()
	cpu := (cpuTime() - cpu0).Seconds()
	var pkts, pktBytes, payload uint64
	for i, c := range members {
		s := c.Stats()
		if s.SendErrors > 0 || s.DroppedMalformed > 0 {
			fmt.Fprintf(os.Stderr, "bench/gossip: %s: %d send errors, %d malformed received\n", c.Ring()[0], s.SendErrors, s.DroppedMalformed)
		}
		pkts += s.PacketsSent - before[i].PacketsSent
		pktBytes += s.PacketBytesSent - before[i].PacketBytesSent
		payload += s.BytesSent - before[i].BytesSent
	}
	slices.Sort(ages)
	res.p50, res.p99, res.max = pct(ages, 0.50), pct(ages, 0.99), ages[len(ages)-1]
	res.unknown = float64(unknown) / float64(max(total, 1))
	nf := float64(p.n)
	// Each datagram also costs 28 bytes of IPv4 + UDP header on the wire.
	res.bytesPerSec = float64(pktBytes+28*pkts) / wall / nf
	res.pktsPerSec = float64(pkts) / wall / nf
	res.payloadPerSec = float64(payload) / wall / nf
	res.cpuPerNode = cpu / wall / nf

	if p.failures {
		res.killGone = detect(members, p.n-1, func(c *cluster.Cluster) error { return c.Shutdown() })
		res.leaveGone = detect(members[:p.n-1], p.n-2, func(c *cluster.Cluster) error {
			if err := c.Leave(5 * time.Second); err != nil {
				return err
			}
			return c.Shutdown()
		})
	}
	return res, nil
}

// detect stops members[victim] with stop and returns how long until every
// other member of members has dropped it (-1 if not within 30 s).
func detect(members []*cluster.Cluster, victim int, stop func(*cluster.Cluster) error) time.Duration {
	name := fmt.Sprintf("node-%02d", victim)
	start := time.Now()
	if err := stop(members[victim]); err != nil {
		fmt.Fprintf(os.Stderr, "bench/gossip: stopping %s: %v\n", name, err)
	}
	for time.Since(start) < 30*time.Second {
		gone := true
		for i, c := range members {
			if i != victim && c.IsMember(name) {
				gone = false
				break
			}
		}
		if gone {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

func converged(members []*cluster.Cluster, n int) bool {
	for _, c := range members {
		v := c.View()
		if len(v.Nodes) != n {
			return false
		}
		for _, nl := range v.Nodes {
			if !nl.Known {
				return false
			}
		}
	}
	return true
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(100 * time.Microsecond).String()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
