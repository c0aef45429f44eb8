// Command pinning (test/bench/pinning) measures what core placement changes
// for the latency swd adds (paper 003, SPLiT, keeps different kinds of work
// on separate cores): a zero-time dummyapp (sleep mode, GET /work?ms=0) and
// an swd in front of it, as separate processes from bin/, once unpinned and
// once pinned apart (swd --cpus A, dummyapp --cpus B), in alternating
// rounds. Each setup is measured at a fixed open-loop rate directly against
// the app and through swd; "swd adds" is the difference of the two at p50
// and p99. The load generator (this process) is not pinned: on a 2-core
// machine there is no third core to give it, so it shares both. `make
// bench` runs it after the in-process figures.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/cpuset"
	"github.com/swd-project/swd/internal/localcluster"
)

func main() {
	rate := flag.Int("rate", 1000, "open-loop rate (req/s)")
	dur := flag.Duration("duration", 10*time.Second, "length of each measurement")
	rounds := flag.Int("rounds", 3, "rounds of unpinned, then pinned apart")
	binDir := flag.String("bin-dir", "bin", "directory holding swd and dummyapp")
	flag.Parse()
	if err := run(*rate, *dur, *rounds, *binDir); err != nil {
		fmt.Fprintln(os.Stderr, "bench/pinning:", err)
		os.Exit(1)
	}
}

type setup struct {
	name      string
	swd, app  string // --cpus lists, "" for none
	directP50 []time.Duration
	directP99 []time.Duration
	viaP50    []time.Duration
	viaP99    []time.Duration
	success   []string // per round: direct / through swd, with any errors
}

func run(rate int, dur time.Duration, rounds int, binDir string) error {
	if runtime.GOOS != "linux" {
		fmt.Println("core placement: skipped (--cpus is Linux only)")
		return nil
	}
	cpus, err := cpuset.Current()
	if err != nil {
		return err
	}
	if len(cpus) < 2 {
		fmt.Printf("core placement: skipped (this process may run on %d CPU, pinning apart needs 2)\n", len(cpus))
		return nil
	}
	a, b := fmt.Sprint(cpus[0]), fmt.Sprint(cpus[1])
	setups := []*setup{{name: "unpinned"}, {name: "pinned apart", swd: a, app: b}}
	fmt.Printf("core placement: zero-time app and swd as processes, %d CPUs (%s), load generator unpinned, %d req/s for %s per measurement, %d rounds\n",
		len(cpus), cpuset.Format(cpus), rate, dur, rounds)
	fmt.Printf("pinned apart: swd --cpus %s, dummyapp --cpus %s; the machine is shared (other builds may run meanwhile)\n\n", a, b)
	for r := 1; r <= rounds; r++ {
		for _, s := range setups {
			if err := measure(s, rate, dur, binDir); err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, r, err)
			}
		}
	}
	fmt.Printf("%-14s %-22s %-22s %-22s\n", "", "app direct p50 / p99", "through swd p50 / p99", "swd adds p50 / p99 (median of rounds)")
	for _, s := range setups {
		fmt.Printf("%-14s %-22s %-22s %-22s\n", s.name,
			pair(med(s.directP50), med(s.directP99)), pair(med(s.viaP50), med(s.viaP99)),
			pair(med(diff(s.viaP50, s.directP50)), med(diff(s.viaP99, s.directP99))))
	}
	fmt.Printf("\nper round, swd adds p50 / p99:\n")
	for _, s := range setups {
		fmt.Printf("  %-14s", s.name)
		d50, d99 := diff(s.viaP50, s.directP50), diff(s.viaP99, s.directP99)
		for i := range d50 {
			fmt.Printf(" %s", pair(d50[i], d99[i]))
		}
		fmt.Println()
	}
	fmt.Printf("\nper round, requests answered 200, direct / through swd:\n")
	for _, s := range setups {
		fmt.Printf("  %-14s %s\n", s.name, strings.Join(s.success, ", "))
	}
	return nil
}

func pair(a, b time.Duration) string {
	return fmt.Sprintf("%s / %s", a.Round(time.Microsecond), b.Round(time.Microsecond))
}

func diff(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func med(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// measure starts the app and swd of s, measures the app directly and
// through swd, and stops both.
func measure(s *setup, rate int, dur time.Duration, binDir string) error {
	addrs, err := localcluster.FreeAddrs(5)
	if err != nil {
		return err
	}
	app, swd := addrs[0], addrs[1]
	appArgs := []string{"--listen", app, "--mode", "sleep", "--log-level", "warn"}
	if s.app != "" {
		appArgs = append(appArgs, "--cpus", s.app)
	}
	swdArgs := []string{"--node-name", "bench", "--listen", swd, "--grpc", addrs[2], "--admin", addrs[3], "--gossip", addrs[4],
		"--app", "http://" + app, "--policy", "none", "--concurrency", "64", "--queue-limit", "100000", "--log-level", "warn"}
	if s.swd != "" {
		swdArgs = append(swdArgs, "--cpus", s.swd)
	}
	stop, err := start(filepath.Join(binDir, "dummyapp"), appArgs, "http://"+app+"/healthz")
	if err != nil {
		return err
	}
	defer stop()
	stopSwd, err := start(filepath.Join(binDir, "swd"), swdArgs, "http://"+swd+"/work?ms=0")
	if err != nil {
		return err
	}
	defer stopSwd()
	// Warm up connections and code paths.
	_, _ = attack("http://"+app, 200, 2*time.Second)
	_, _ = attack("http://"+swd, 200, 2*time.Second)
	direct, err := attack("http://"+app, rate, dur)
	if err != nil {
		return err
	}
	via, err := attack("http://"+swd, rate, dur)
	if err != nil {
		return err
	}
	s.success = append(s.success, fmt.Sprintf("%.2f%% / %.2f%%%s", direct.Success*100, via.Success*100, errorsOf(direct, via)))
	s.directP50 = append(s.directP50, direct.Latencies.P50)
	s.directP99 = append(s.directP99, direct.Latencies.P99)
	s.viaP50 = append(s.viaP50, via.Latencies.P50)
	s.viaP99 = append(s.viaP99, via.Latencies.P99)
	return nil
}

// errorsOf names the distinct errors of two runs (at most three).
func errorsOf(ms ...*vegeta.Metrics) string {
	var errs []string
	for _, m := range ms {
		for _, e := range m.Errors {
			if len(errs) < 3 && !slices.Contains(errs, e) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) == 0 {
		return ""
	}
	return " (" + strings.Join(errs, "; ") + ")"
}

// start runs bin with args until the returned stop is called, once ready
// answers 200.
func start(bin string, args []string, ready string) (stop func(), err error) {
	cmd := exec.Command(bin, args...)
	var logs bytes.Buffer // shown only if it never gets ready
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return nil, fmt.Errorf("%s never answered %s: %s", filepath.Base(bin), ready, logs.String())
}

// attack runs vegeta against base + "/work?ms=0" at rate req/s.
func attack(base string, rate int, dur time.Duration) (*vegeta.Metrics, error) {
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: base + "/work?ms=0"})
	a := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second), vegeta.Connections(10000))
	var m vegeta.Metrics
	for res := range a.Attack(tr, vegeta.Rate{Freq: rate, Per: time.Second}, dur, "bench") {
		m.Add(res)
	}
	m.Close()
	if m.Requests == 0 {
		return nil, fmt.Errorf("no request completed against %s", base)
	}
	return &m, nil
}
