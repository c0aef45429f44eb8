//go:build linux

// Command hardening (test/bench/hardening) measures the four hardening
// figures of issue 17 on real swd processes (loopback only), for one or two
// builds, so a fixed build and the one before can be compared in one run:
//
//  1. slots: the most requests an app that ignores disconnects has at once
//     behind swd --concurrency 2, while 200 clients each send GET /work and
//     leave after 30 ms (HTTP/1, then h2c where each leaving client resets
//     its stream);
//  2. dead app: the share of 1,500 requests answered 200 by a 3-node nu
//     cluster (m = 2) whose node-2 app was killed, sent to node-0;
//  3. slow upload: how long a GET takes on a default node (m = 1) while one
//     client holds a request head with Content-Length 2,000,000 and sends
//     no body;
//  4. memory: swd's RSS growth while 200 uploads stall one byte short of
//     1 MiB (200 HTTP/1 connections; then h2c with --max-connections 10).
//
// Linux only: it reads swd's RSS from /proc. Run it under the team's
// measurement lock (make bench-hardening does).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/localcluster"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding swd and dummyapp (the build measured)")
	baseDir := flag.String("base-bin-dir", "", "a second build to measure first, for a before/after table (e.g. main's bin/)")
	only := flag.String("only", "slots,deadapp,upload,memory", "comma-separated scenarios to run")
	flag.Parse()
	builds := []string{*binDir}
	names := []string{"this build"}
	if *baseDir != "" {
		builds = []string{*baseDir, *binDir}
		names = []string{"base", "this build"}
	}
	for i, dir := range builds {
		fmt.Printf("== %s (%s)\n", names[i], dir)
		for _, s := range strings.Split(*only, ",") {
			var err error
			switch s {
			case "slots":
				err = slots(dir)
			case "deadapp":
				err = deadApp(dir)
			case "upload":
				err = slowUpload(dir)
			case "memory":
				err = memory(dir)
			default:
				err = fmt.Errorf("unknown scenario %q", s)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench/hardening:", s+":", err)
				os.Exit(1)
			}
		}
	}
}

// start runs a cluster of the build in dir; stop it with the returned func.
func start(dir string, mutate func(*localcluster.Config)) (*localcluster.Cluster, func(), error) {
	cfg := localcluster.DefaultConfig()
	cfg.Nodes = 1
	cfg.BinDir = dir
	cfg.ReadyTimeout = 60 * time.Second
	mutate(&cfg)
	c, err := localcluster.Start(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { c.Stop(20 * time.Second) }, nil
}

// stubborn is an app that ignores disconnects: each request works its
// full time, whatever happens to its connection.
type stubborn struct{ now, top atomic.Int64 }

func (a *stubborn) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := a.now.Add(1)
	for {
		top := a.top.Load()
		if n <= top || a.top.CompareAndSwap(top, n) {
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	a.now.Add(-1)
	_, _ = io.WriteString(w, "done")
}

func slots(dir string) error {
	app := &stubborn{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, stop, err := start(dir, func(cfg *localcluster.Config) {
		cfg.Concurrency = 2
		cfg.SwdArgs = []string{"--app", "http://" + ln.Addr().String(), "--early-reject=false"}
	})
	if err != nil {
		return err
	}
	defer stop()
	for _, h2c := range []bool{false, true} {
		app.top.Store(0)
		tr := &http.Transport{MaxConnsPerHost: 0}
		if h2c {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr.Protocols = &p
		}
		hc := &http.Client{Transport: tr}
		var wg sync.WaitGroup
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Info.Nodes[0].HTTP+"/work", nil)
				if resp, err := hc.Do(req); err == nil {
					_ = resp.Body.Close()
				}
			}()
			time.Sleep(time.Millisecond) // clients arrive over 200 ms
		}
		wg.Wait()
		deadline := time.Now().Add(90 * time.Second)
		for app.now.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		tr.CloseIdleConnections()
		proto := "HTTP/1"
		if h2c {
			proto = "h2c rapid reset"
		}
		fmt.Printf("slots    %-16s m = 2, 200 clients leaving after 30 ms: the app had at most %d requests at once\n", proto, app.top.Load())
	}
	return nil
}

func deadApp(dir string) error {
	c, stop, err := start(dir, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Concurrency, cfg.Policy = 3, 2, "nu"
	})
	if err != nil {
		return err
	}
	defer stop()
	if err := c.Kill("app-2"); err != nil {
		return err
	}
	const total, workers = 1500, 12
	var next, ok atomic.Int64
	codes := map[int]int{}
	var mu sync.Mutex
	hc := &http.Client{Timeout: 35 * time.Second}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				code := 0
				resp, err := hc.Get("http://" + c.Info.Nodes[0].HTTP + "/work?ms=2")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				if code == http.StatusOK {
					ok.Add(1)
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("deadapp  3 nodes, nu, m = 2, app-2 killed, 1,500 requests to node-0: %d answered 200 (%.1f %%), statuses %v\n",
		ok.Load(), 100*float64(ok.Load())/total, codes)
	return nil
}

func slowUpload(dir string) error {
	c, stop, err := start(dir, func(*localcluster.Config) {})
	if err != nil {
		return err
	}
	defer stop()
	addr := c.Info.Nodes[0].HTTP
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /work?ms=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // the head is read and the request admitted
	hc := &http.Client{Timeout: 40 * time.Second}
	began := time.Now()
	resp, err := hc.Get("http://" + addr + "/work?ms=1")
	took := time.Since(began)
	status := "no answer: " + fmt.Sprint(err)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		status = resp.Status
	}
	fmt.Printf("upload   default node (m = 1), one client holding Content-Length 2,000,000 with no body: a GET took %s (%s)\n",
		took.Round(time.Millisecond), status)
	return nil
}

func memory(dir string) error {
	for _, h2c := range []bool{false, true} {
		if err := memoryOnce(dir, h2c); err != nil {
			return err
		}
	}
	return nil
}

func memoryOnce(dir string, h2c bool) error {
	var extra []string
	if h2c {
		extra = []string{"--max-connections", "10"}
	}
	c, stop, err := start(dir, func(cfg *localcluster.Config) { cfg.SwdArgs = extra })
	if err != nil {
		return err
	}
	defer stop()
	pid, err := c.PID("node-0")
	if err != nil {
		return err
	}
	before, err := rssKB(pid)
	if err != nil {
		return err
	}
	const uploads, size = 200, 1 << 20
	url := "http://" + c.Info.Nodes[0].HTTP + "/work?ms=1"
	release := make(chan struct{})
	var sent, refused atomic.Int64
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: uploads}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	hc := &http.Client{Transport: tr}
	for range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, pw := io.Pipe()
			go func() {
				chunk := make([]byte, 32<<10)
				left := size - 1
				for left > 0 {
					n := min(left, len(chunk))
					if _, err := pw.Write(chunk[:n]); err != nil {
						return
					}
					left -= n
				}
				sent.Add(1)
				<-release
				_ = pw.CloseWithError(errors.New("upload abandoned"))
			}()
			req, _ := http.NewRequest(http.MethodPost, url, pr)
			req.ContentLength = size
			resp, err := hc.Do(req)
			if err == nil {
				if resp.StatusCode == http.StatusServiceUnavailable {
					refused.Add(1)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			_ = pr.CloseWithError(errors.New("done"))
		}()
	}
	// Wait until every upload has either sent all but its last byte or
	// been refused, and swd's memory has settled.
	deadline := time.Now().Add(60 * time.Second)
	for sent.Load()+refused.Load() < uploads && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	after, err := rssKB(pid)
	if err != nil {
		return err
	}
	close(release)
	wg.Wait()
	tr.CloseIdleConnections()
	proto := "HTTP/1, 200 connections"
	if h2c {
		proto = "h2c, --max-connections 10"
	}
	fmt.Printf("memory   %-26s 200 uploads stalled 1 byte short of 1 MiB: RSS %d -> %d MiB (+%d MiB); %d refused with 503, %d stalled whole\n",
		proto, before/1024, after/1024, (after-before)/1024, refused.Load(), sent.Load())
	return nil
}

func rssKB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := s.Text(); strings.HasPrefix(line, "VmRSS:") {
			var kb int64
			_, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")), "%d", &kb)
			return kb, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
