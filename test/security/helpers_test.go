// Package security runs SWD's security end-to-end tests: mutual TLS on the
// gRPC port, the refusal to expose a plaintext gRPC port beyond loopback,
// membership and host checks on transferred requests, HTTP limits and
// timeouts, and malformed (smuggling) HTTP requests. They start real swd,
// dummyapp and swdctl processes built by `make build` into bin/, on
// 127.0.0.1 with free ports, and skip with a message when the binaries are
// missing or in -short mode.
package security

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/swd-project/swd/internal/tlsutil"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// binDir returns the repository's bin/ directory, skipping the test when a
// binary is missing or in -short mode.
func binDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping end-to-end security test in -short mode")
	}
	return testutil.BinDir(t, "swd", "dummyapp", "swdctl")
}

// Children are started from one goroutine locked to its OS thread for the
// test binary's life, so their parent-death signal (SIGKILL) fires only when
// the test binary dies (for example on a -timeout panic), never earlier.
var (
	spawnOnce sync.Once
	spawnReqs = make(chan spawnReq)
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for r := range spawnReqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}

// proc is a child process started by start.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{}
}

// start runs bin/BIN with args. The process is stopped when the test ends
// (SIGTERM, SIGKILL after 10 s) and its output is logged if the test failed.
func start(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir(t), bin), args...)
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, spawn(cmd), "start %s", name)
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("== %s output (tail)\n%s", name, testutil.Tail(p.out.String(), 4000))
		}
	})
	return p
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to timeout for the process to exit and returns its
// exit code; ok is false if it is still running.
func (p *proc) waitExit(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return -1, false
	}
}

// cleanEnv drops SWD_*, SWDCTL_* and DUMMYAPP_* variables so the caller's
// settings do not leak into the children's flags.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SWD_") || strings.HasPrefix(kv, "SWDCTL_") || strings.HasPrefix(kv, "DUMMYAPP_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// errPortTaken: a child could not bind a port that was free a moment ago
// (taken by another process in between); the caller retries on new ports.
var errPortTaken = errors.New("port taken")

// waitUp polls ok every 50 ms until it holds (nil), p exits (an error,
// errPortTaken if it could not bind), or 30 s pass.
func waitUp(p *proc, ok func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if p.exited() {
			if strings.Contains(p.out.String(), "address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("%s exited:\n%s", p.name, testutil.Tail(p.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not up after 30 s", p.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// waitFor polls ok every 50 ms until it holds, p exits, or 30 s pass.
func waitFor(t *testing.T, p *proc, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if p != nil && p.exited() {
			require.FailNowf(t, "process exited", "%s exited while waiting for %s:\n%s", p.name, what, testutil.Tail(p.out.String(), 4000))
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "timed out", "waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func httpOK(url string) bool {
	resp, err := testutil.Get(&http.Client{Timeout: time.Second}, url)
	return err == nil && resp.StatusCode == http.StatusOK
}

// startApp starts a sleep-mode dummyapp named name and returns its address.
func startApp(t *testing.T, name string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := testutil.FreeAddr(t)
		p := start(t, "dummyapp", "app "+name, "--listen", addr, "--mode", "sleep", "--name", name)
		err := waitUp(p, func() bool { return httpOK("http://" + addr + "/healthz") })
		if err == nil {
			return addr
		}
		require.True(t, errors.Is(err, errPortTaken) && attempt < 3, "dummyapp %s: %v", name, err)
	}
}

// node is one running swd.
type node struct {
	Name, HTTP, GRPC, Admin, Gossip, App string
	p                                    *proc
}

// swdOpts describes an swd to start; empty addresses get free ports.
type swdOpts struct {
	Name string
	App  string // the app's host:port
	Join string // a seed's gossip address
	// GRPCHost is --grpc's host (default 127.0.0.1; the port is free).
	GRPCHost string
	// Args are extra flags (they may repeat and so override the defaults).
	Args []string
}

// swdArgs returns the command line for o, filling in free ports.
func swdArgs(t *testing.T, o swdOpts) (*node, []string) {
	t.Helper()
	a := testutil.FreeAddrs(t, 4)
	n := &node{Name: o.Name, HTTP: a[0], GRPC: a[1], Admin: a[2], Gossip: a[3], App: o.App}
	if o.GRPCHost != "" {
		_, port, _ := net.SplitHostPort(n.GRPC)
		n.GRPC = net.JoinHostPort(o.GRPCHost, port)
	}
	args := []string{
		"--node-name", o.Name, "--listen", n.HTTP, "--grpc", n.GRPC, "--admin", n.Admin,
		"--gossip", n.Gossip, "--app", "http://" + o.App, "--policy", "none", "--concurrency", "1",
		"--drain-timeout", "2s",
	}
	if o.Join != "" {
		args = append(args, "--join", o.Join)
	}
	return n, append(args, o.Args...)
}

// startSwd starts an swd and waits until its admin port answers /healthz.
func startSwd(t *testing.T, o swdOpts) *node {
	t.Helper()
	for attempt := 1; ; attempt++ {
		n, args := swdArgs(t, o)
		n.p = start(t, "swd", o.Name, args...)
		err := waitUp(n.p, func() bool { return httpOK("http://" + n.Admin + "/healthz") })
		if err == nil {
			return n
		}
		require.True(t, errors.Is(err, errPortTaken) && attempt < 3, "swd %s: %v", o.Name, err)
	}
}

// oneNode starts a dummyapp and an swd in front of it.
func oneNode(t *testing.T, name string, args ...string) *node {
	t.Helper()
	app := startApp(t, "app-"+name)
	return startSwd(t, swdOpts{Name: name, App: app, Args: args})
}

// certsInit runs `swdctl certs init` for names into a new temporary
// directory and returns it.
func certsInit(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	out, code := swdctl(t, append([]string{"certs", "init", "--dir", dir}, names...)...)
	require.Zero(t, code, "swdctl certs init: %s", out)
	return dir
}

// tlsFlags returns --tls-cert/--tls-key/--tls-ca for certificate name in dir.
func tlsFlags(dir, name string) []string {
	return []string{
		"--tls-cert", filepath.Join(dir, name+".pem"),
		"--tls-key", filepath.Join(dir, name+"-key.pem"),
		"--tls-ca", filepath.Join(dir, "ca.pem"),
	}
}

// mtls returns a dial option presenting certificate name from dir and
// trusting dir's CA.
func mtls(t *testing.T, dir, name string) grpc.DialOption {
	t.Helper()
	opt, err := tlsutil.ClientOption(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"), filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	return opt
}

// swdctl runs bin/swdctl with args and returns its combined output and
// exit code.
func swdctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "swdctl"), args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err, "run swdctl %v", args)
	return string(out), 0
}

// fwdAnswer is what a Transfer.Forward call streamed back.
type fwdAnswer struct {
	Status   int
	Header   http.Header
	Body     []byte
	ServedBy string
}

// forward calls Transfer.Forward and collects the streamed answer.
// pull calls Transfer.Pull as node from.
func pull(cc *grpc.ClientConn, from string) (*swdv1.PullResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return swdv1.NewTransferClient(cc).Pull(ctx, &swdv1.PullRequest{FromNode: from, PullId: 1})
}

func forward(cc *grpc.ClientConn, m *swdv1.ForwardRequest) (fwdAnswer, error) {
	var a fwdAnswer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := swdv1.NewTransferClient(cc).Forward(ctx, m)
	if err != nil {
		return a, err
	}
	for {
		part, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return a, nil
		}
		if err != nil {
			return a, err
		}
		switch p := part.GetPart().(type) {
		case *swdv1.ForwardResponse_Head:
			a.Status = int(p.Head.GetStatus())
			a.ServedBy = p.Head.GetServedBy()
			a.Header = http.Header{}
			for _, h := range p.Head.GetHeaders() {
				a.Header[http.CanonicalHeaderKey(h.GetName())] = h.GetValues()
			}
		case *swdv1.ForwardResponse_BodyChunk:
			a.Body = append(a.Body, p.BodyChunk...)
		}
	}
}

// workRequest is a transfer message for GET /work?ms=1 from node from.
func workRequest(from string) *swdv1.ForwardRequest {
	return &swdv1.ForwardRequest{
		RequestId: "security-test", Method: http.MethodGet, Path: "/work", RawQuery: "ms=1",
		ArrivalUnixNano: time.Now().UnixNano(), Hops: 1, FromNode: from, Host: "swd.test",
		RemoteAddr: "127.0.0.1:1", Scheme: "http",
	}
}

// rawAnswer is what a server sent back on a raw connection.
type rawAnswer struct {
	Status int
	Header http.Header
	Body   string
	// Closed is true when the server closed the connection after the
	// first answer; Extra holds anything it sent after that answer
	// (a second answer means the bytes after the first request were
	// served as a request of their own).
	Closed bool
	Extra  string
	Err    error
}

// rawHTTP writes data on a new TCP connection to addr and reads one HTTP/1
// answer, then up to linger for more bytes or the connection's close.
func rawHTTP(t *testing.T, addr string, data []byte, linger time.Duration) rawAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(data)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return rawAnswer{Err: fmt.Errorf("read answer: %w", err)}
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	a := rawAnswer{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(linger)))
	rest, err := io.ReadAll(br)
	a.Extra = string(rest)
	var ne net.Error
	a.Closed = err == nil || !(errors.As(err, &ne) && ne.Timeout())
	return a
}

// member starts an swd (and its dummyapp) named name that joins n0's
// cluster, and waits until n0 counts it as a member: forged transfers in
// these tests claim to come from it (no node takes a transfer naming
// itself). ctl is how to reach n0's Control service.
func member(t *testing.T, n0 *node, ctl grpc.DialOption, name string, args ...string) *node {
	t.Helper()
	n := startSwd(t, swdOpts{Name: name, App: startApp(t, "app-"+name), Join: n0.Gossip, Args: args})
	cl := swdv1.NewControlClient(testutil.Dial(t, n0.GRPC, ctl))
	waitFor(t, n0.p, name+" to join", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := cl.Status(ctx, &swdv1.StatusRequest{})
		return err == nil && s.GetMembers() >= 2
	})
	return n
}
