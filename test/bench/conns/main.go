//go:build linux

// Command conns (test/bench/conns) measures swd's memory with many open client
// connections: it starts one swd + dummyapp, opens --conns keep-alive
// connections that each complete one request and then stay idle, and
// prints swd's resident set size before and after, and per connection.
// It raises its file-descriptor limit first (needs root for more than the
// hard limit); swd inherits it. Linux only: it reads swd's RSS from /proc.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swd-project/swd/internal/localcluster"
)

func main() {
	conns := flag.Int("conns", 20000, "client connections to open")
	binDir := flag.String("bin-dir", "bin", "directory holding swd and dummyapp")
	flag.Parse()
	if err := run(*conns, *binDir); err != nil {
		fmt.Fprintln(os.Stderr, "bench/conns:", err)
		os.Exit(1)
	}
}

func run(n int, binDir string) error {
	want := uint64(2*n + 4096)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Max < want {
		lim.Max = want
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		// Not allowed to raise the hard limit (no CAP_SYS_RESOURCE): use
		// what the hard limit allows, and say so.
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise the soft file limit: %w", err)
		}
		if limit := int(lim.Max) - 512; n > limit {
			fmt.Printf("note: the hard file limit is %d and cannot be raised here (%v); measuring %d connections instead of %d\n",
				lim.Max, err, limit, n)
			n = limit
		}
	}
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.Policy, cfg.BinDir = 1, "none", binDir
	c, err := localcluster.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer c.Stop(20 * time.Second)
	pid, err := c.PID("node-0")
	if err != nil {
		return err
	}
	addr := c.Info.Nodes[0].HTTP
	before, err := rssKB(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	open := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 256)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, err := oneRequest(addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("connection %d: %w", i, err)
			}
			open[i] = conn
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range open {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	if firstErr != nil {
		return firstErr
	}
	opened := time.Since(start)
	time.Sleep(2 * time.Second) // let the runtime settle
	after, err := rssKB(pid)
	if err != nil {
		return err
	}
	resp, err := http.Get("http://" + addr + "/work?ms=1")
	if err != nil {
		return fmt.Errorf("swd stopped answering with %d connections open: %w", n, err)
	}
	_ = resp.Body.Close()
	fmt.Printf("swd with %d idle keep-alive client connections (each served one request), opened in %s\n", n, opened.Round(time.Millisecond))
	fmt.Printf("  RSS before   %8.1f MiB\n", float64(before)/1024)
	fmt.Printf("  RSS after    %8.1f MiB\n", float64(after)/1024)
	fmt.Printf("  per conn     %8.1f KiB\n", float64(after-before)/float64(n))
	fmt.Printf("  new request with all of them open: %s\n", resp.Status)
	return nil
}

// oneRequest opens a connection, completes one request on it and leaves
// it open and idle.
func oneRequest(addr string) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write([]byte("GET /work?ms=0 HTTP/1.1\r\nHost: bench\r\n\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	return conn, nil
}

func rssKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kb int64
			_, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")), "%d", &kb)
			return kb, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
