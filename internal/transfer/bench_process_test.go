package transfer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// peerEnv makes this test binary run as the other process of
// BenchmarkPullRoundTripProcess (see TestMain) instead of running tests.
const peerEnv = "SWD_TRANSFER_BENCH_PEER"

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) == "1" {
		if err := runBenchPeer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runBenchPeer serves a Transfer server (nothing to hand over) and a TCP
// echo on loopback, prints "grpc-address tcp-address" on out, and returns
// when in ends (its parent closed the pipe or died).
func runBenchPeer(in io.Reader, out io.Writer) error {
	cfg := transfer.DefaultServerConfig()
	cfg.NodeName = "node-b"
	srv, err := transfer.NewServer(cfg, emptyHead{}, members{"node-a": true})
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer tl.Close()
	gs := grpc.NewServer()
	swdv1.RegisterTransferServer(gs, srv)
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()
	go echo(tl)
	if _, err := fmt.Fprintln(out, gl.Addr().String(), tl.Addr().String()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// pullGap is the idle time between two round trips of
// BenchmarkPullRoundTripProcess: long enough for both processes to go to
// sleep, as between a cluster's pulls.
const pullGap = 2 * time.Millisecond

// BenchmarkPullRoundTripProcess times the round trip between two processes
// (this one and a copy of the test binary) that sleep pullGap between
// exchanges, as a pull finds them: a Transfer.Pull (a miss) and the same
// pingBytes on one raw TCP connection. ns/op is the mean round trip (the
// gaps excluded); p50-ns and p90-ns its percentiles. Unlike
// BenchmarkPullRoundTrip, each exchange wakes sleeping threads in another
// process, which is where gRPC's hand-offs between goroutines cost most.
func BenchmarkPullRoundTripProcess(b *testing.B) {
	grpcAddr, tcpAddr := startBenchPeer(b)
	b.Run("grpc", func(b *testing.B) {
		c := newClient(b)
		ctx, cancel := context.WithTimeout(context.Background(), benchLimit)
		defer cancel()
		_, err := c.Pull(ctx, grpcAddr, "node-a", 1) // connect outside the timing
		require.NoError(b, err)
		timeGapped(b, func(i int) error {
			_, err := c.Pull(ctx, grpcAddr, "node-a", uint64(i+2))
			return err
		})
	})
	b.Run("tcp", func(b *testing.B) {
		conn, err := net.Dial("tcp", tcpAddr)
		require.NoError(b, err)
		defer conn.Close()
		require.NoError(b, conn.SetDeadline(time.Now().Add(benchLimit)))
		buf := make([]byte, pingBytes)
		timeGapped(b, func(int) error { return ping(conn, buf) })
	})
}

// startBenchPeer starts the other process and returns its addresses. It
// must print them within benchLimit; at cleanup its stdin closes (it
// exits) and, should it not, it is killed.
func startBenchPeer(b *testing.B) (grpcAddr, tcpAddr string) {
	b.Helper()
	// -test.run is a guard: were the peer mode ever skipped, the copy
	// would run no test.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = stdin.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	type addrs struct {
		line string
		err  error
	}
	got := make(chan addrs, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		got <- addrs{line, err}
	}()
	select {
	case a := <-got:
		require.NoError(b, a.err, "the bench peer did not print its addresses")
		f := strings.Fields(a.line)
		require.Len(b, f, 2, "bench peer printed %q", a.line)
		return f[0], f[1]
	case <-time.After(benchLimit):
		_ = cmd.Process.Kill()
		b.Fatalf("the bench peer printed no addresses within %s", benchLimit)
		return "", ""
	}
}

// timeGapped runs exchange b.N times, pullGap apart, and reports the mean
// round trip as ns/op with its 50th and 90th percentiles.
func timeGapped(b *testing.B, exchange func(i int) error) {
	ns := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		time.Sleep(pullGap)
		t := time.Now()
		if err := exchange(i); err != nil {
			b.Fatal(err)
		}
		ns = append(ns, float64(time.Since(t).Nanoseconds()))
	}
	b.StopTimer()
	sum := stats.Summarize(ns) // sorts ns
	b.ReportMetric(sum.Mean, "ns/op")
	b.ReportMetric(sum.P50, "p50-ns")
	b.ReportMetric(stats.Percentile(ns, 90), "p90-ns")
}
