// Package localcluster starts a loopback SWD cluster as real processes: N
// dummyapp + N swd, optionally a dispatcher, on free ports. `swdctl local
// up`, the load generator's --local, `make demo` and the end-to-end tests
// all use it.
//
// Children die with the launcher on Linux: each is started with Linux's
// parent-death signal (SIGKILL) from one OS thread that stays locked for the
// cluster's life, so even a SIGKILLed launcher leaves no process behind.
// Other systems have no parent-death signal: there the children (each in its
// own process group on Unix) are stopped by Stop, and a launcher killed
// with SIGKILL leaves them running (procAttr, in localcluster_*.go).
//
// Concurrency: a Cluster's methods are safe for concurrent use.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/childproc"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// Config configures a local cluster.
type Config struct {
	// Nodes is how many swd + dummyapp pairs to start.
	Nodes int
	// AppMode is dummyapp's --mode: "sleep" (default) or "busy".
	AppMode string
	// Dispatcher also starts `swd --role dispatcher`.
	Dispatcher bool
	// Policy is every node's initial --policy.
	Policy string
	// Concurrency is every node's m.
	Concurrency int
	// AppConcurrency is every dummyapp's --concurrency: the most requests
	// it serves at once, the others waiting in arrival order (0: no
	// limit). Set it to Concurrency to give balancers other than swd (which
	// never sends more than m) apps of the same capacity.
	AppConcurrency int
	// BinDir holds the swd and dummyapp binaries (default: the directory
	// of the running executable).
	BinDir string
	// LogDir, if set, receives one log file per process; else logs are
	// discarded.
	LogDir string
	// ReadyTimeout bounds the wait for every node to see every other.
	ReadyTimeout time.Duration
	// SwdArgs are extra flags for every swd (nodes and dispatcher).
	SwdArgs []string
	// NodeArgs are extra flags for every node's swd, not the dispatcher's
	// (e.g. --affinity, which a dispatcher refuses).
	NodeArgs []string
	// AppArgs are extra flags for every dummyapp (e.g. cache mode).
	AppArgs []string
	// NamePrefix names nodes PREFIX-0, PREFIX-1, ... (default "node").
	NamePrefix string
	// ControlToken, if set, is every swd's --control-token; the launcher
	// uses it to poll readiness.
	ControlToken string
}

// DefaultConfig returns a 4-node sleep-mode cluster running nu.
func DefaultConfig() Config {
	return Config{Nodes: 4, AppMode: "sleep", Policy: "nu", Concurrency: 1, ReadyTimeout: 30 * time.Second, NamePrefix: "node"}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 256:
		return fmt.Errorf("nodes must be between 1 and 256, got %d", c.Nodes)
	case c.AppMode != "sleep" && c.AppMode != "busy":
		return fmt.Errorf("app mode must be sleep or busy, got %q", c.AppMode)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.AppConcurrency < 0:
		return fmt.Errorf("app concurrency must be 0 (no limit) or more, got %d", c.AppConcurrency)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("ready timeout must be positive, got %s", c.ReadyTimeout)
	case c.Policy == "":
		return errors.New("policy must not be empty")
	}
	return nil
}

// NodeInfo is one process group's addresses.
type NodeInfo struct {
	Name   string `json:"name"`
	HTTP   string `json:"http"`
	GRPC   string `json:"grpc"`
	Admin  string `json:"admin"`
	Gossip string `json:"gossip"`
	App    string `json:"app,omitempty"`
}

// Info is what `swdctl local up` prints once the cluster is ready.
type Info struct {
	Nodes      []NodeInfo `json:"nodes"`
	Dispatcher *NodeInfo  `json:"dispatcher,omitempty"`
}

// Cluster is a running local cluster.
type Cluster struct {
	Info Info
	cfg  Config

	mu     sync.Mutex
	procs  map[string]*proc // by name: "node-0", "app-0", "dispatcher"
	done   chan struct{}
	closed bool
}

type proc struct {
	name string
	args []string
	bin  string
	cmd  *exec.Cmd
	log  *os.File
	exit chan struct{}
}

// Start launches the cluster and waits until every node sees every other.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.NamePrefix == "" {
		cfg.NamePrefix = "node"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find binaries: %w", err)
		}
		cfg.BinDir = filepath.Dir(exe)
	}
	for _, b := range []string{"swd", "dummyapp"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("binary %s not found in %s (run `make build`, or pass --bin-dir): %w", b, cfg.BinDir, err)
		}
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("log dir: %w", err)
		}
	}
	c := &Cluster{cfg: cfg, procs: map[string]*proc{}, done: make(chan struct{})}
	if err := c.launch(); err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	if err := c.waitReady(rctx); err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) launch() error {
	n := c.cfg.Nodes
	total := n*5 + 4
	ports, err := FreePorts(total)
	if err != nil {
		return err
	}
	next := func() string {
		p := ports[0]
		ports = ports[1:]
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	infos := make([]NodeInfo, n)
	for i := range infos {
		infos[i] = NodeInfo{Name: fmt.Sprintf("%s-%d", c.cfg.NamePrefix, i), HTTP: next(), GRPC: next(), Admin: next(), Gossip: next(), App: next()}
	}
	// Every node knows up to three seeds (the first nodes, not itself), as
	// a deployment's join list would, so any node can restart and rejoin.
	seedsFor := func(self string) string {
		var s []string
		for _, ni := range infos[:min(n, 4)] {
			if ni.Name != self && len(s) < 3 {
				s = append(s, ni.Gossip)
			}
		}
		return strings.Join(s, ",")
	}
	seed := seedsFor("")
	for i := 0; i < n; i++ {
		ni := infos[i]
		name := ni.Name
		appArgs := []string{"--listen", ni.App, "--mode", c.cfg.AppMode, "--name", name}
		if c.cfg.AppConcurrency > 0 {
			appArgs = append(appArgs, "--concurrency", strconv.Itoa(c.cfg.AppConcurrency))
		}
		appArgs = append(appArgs, c.cfg.AppArgs...)
		if err := c.start("app-"+strconv.Itoa(i), "dummyapp", appArgs...); err != nil {
			return err
		}
		args := []string{
			"--node-name", name, "--listen", ni.HTTP, "--grpc", ni.GRPC, "--admin", ni.Admin,
			"--gossip", ni.Gossip, "--app", "http://" + ni.App, "--policy", c.cfg.Policy,
			"--concurrency", strconv.Itoa(c.cfg.Concurrency),
		}
		if seeds := seedsFor(name); seeds != "" {
			args = append(args, "--join", seeds)
		}
		args = append(args, c.tokenArgs()...)
		args = append(args, c.cfg.SwdArgs...)
		args = append(args, c.cfg.NodeArgs...)
		if err := c.start(name, "swd", args...); err != nil {
			return err
		}
		c.Info.Nodes = append(c.Info.Nodes, ni)
	}
	if c.cfg.Dispatcher {
		d := NodeInfo{Name: "dispatcher", HTTP: next(), GRPC: next(), Admin: next(), Gossip: next()}
		args := []string{
			"--role", "dispatcher", "--node-name", d.Name, "--listen", d.HTTP, "--grpc", d.GRPC,
			"--admin", d.Admin, "--gossip", d.Gossip, "--join", seed, "--policy", c.cfg.Policy,
		}
		args = append(args, c.tokenArgs()...)
		args = append(args, c.cfg.SwdArgs...)
		if err := c.start("dispatcher", "swd", args...); err != nil {
			return err
		}
		c.Info.Dispatcher = &d
	}
	return nil
}

func (c *Cluster) tokenArgs() []string {
	if c.cfg.ControlToken == "" {
		return nil
	}
	return []string{"--control-token", c.cfg.ControlToken}
}

func (c *Cluster) start(name, bin string, args ...string) error {
	p := &proc{name: name, bin: bin, args: args, exit: make(chan struct{})}
	return c.startProc(p)
}

func (c *Cluster) startProc(p *proc) error {
	cmd := exec.Command(filepath.Join(c.cfg.BinDir, p.bin), p.args...)
	cmd.SysProcAttr = childproc.Attr(syscall.SIGKILL)
	cmd.Env = cleanEnv()
	if c.cfg.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(c.cfg.LogDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.log = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	p.cmd = cmd
	p.exit = make(chan struct{})
	select {
	case <-c.done:
		return errors.New("local cluster stopped")
	default:
	}
	if err := childproc.Start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		_ = cmd.Wait()
		if p.log != nil {
			_ = p.log.Close()
		}
		close(p.exit)
	}()
	c.mu.Lock()
	c.procs[p.name] = p
	c.mu.Unlock()
	return nil
}

// cleanEnv drops SWD_* and DUMMYAPP_* variables so the launcher's own
// settings do not leak into the children's flags.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if len(kv) > 4 && (kv[:4] == "SWD_" || (len(kv) > 9 && kv[:9] == "DUMMYAPP_")) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// waitReady polls every swd's Status until each sees all members.
func (c *Cluster) waitReady(ctx context.Context) error {
	want := c.cfg.Nodes
	all := append([]NodeInfo(nil), c.Info.Nodes...)
	if c.Info.Dispatcher != nil {
		want++
		all = append(all, *c.Info.Dispatcher)
	}
	// The apps first: a node that gossips its load before its app listens
	// would answer the first requests with 502.
	for _, ni := range c.Info.Nodes {
		if ni.App == "" {
			continue
		}
		if err := waitHTTP(ctx, "http://"+ni.App+"/healthz", c.exited); err != nil {
			return fmt.Errorf("app of %s not ready: %w", ni.Name, err)
		}
	}
	for _, ni := range all {
		if err := waitStatus(ctx, ni.GRPC, c.cfg.ControlToken, c.exited, func(s *swdv1.StatusResponse) bool {
			known := 0
			for _, v := range s.GetView() {
				if v.GetKnown() {
					known++
				}
			}
			return int(s.GetMembers()) == want && known == c.cfg.Nodes
		}); err != nil {
			if dead := c.exited(); dead != "" {
				return fmt.Errorf("%s exited during start-up (see its log with --log-dir)", dead)
			}
			return fmt.Errorf("node %s not ready: %w", ni.Name, err)
		}
	}
	return nil
}

func (c *Cluster) exited() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, p := range c.procs {
		select {
		case <-p.exit:
			return name
		default:
		}
	}
	return ""
}

// waitHTTP polls url until it answers 200, ctx ends or a child exits.
func waitHTTP(ctx context.Context, url string, exited func() string) error {
	cl := &http.Client{Timeout: time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := cl.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		if dead := exited(); dead != "" {
			return fmt.Errorf("%s exited", dead)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitStatus(ctx context.Context, addr, token string, exited func() string, ok func(*swdv1.StatusResponse) bool) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: token}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	cl := swdv1.NewControlClient(cc)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := cl.Status(cctx, &swdv1.StatusRequest{})
		cancel()
		if err == nil && ok(s) {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("sees %d members, %d load entries", s.GetMembers(), len(s.GetView()))
		}
		if dead := exited(); dead != "" {
			return fmt.Errorf("%s exited", dead)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to one process ("node-2", "app-2", "dispatcher").
func (c *Cluster) Kill(name string) error {
	c.mu.Lock()
	p, ok := c.procs[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	_ = p.cmd.Process.Kill()
	<-p.exit
	return nil
}

// Signal sends sig to one process and waits up to timeout for it to exit.
func (c *Cluster) Signal(name string, sig os.Signal, timeout time.Duration) error {
	c.mu.Lock()
	p, ok := c.procs[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exit:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s", name, timeout)
	}
}

// Restart starts a process that exited again with the same arguments.
func (c *Cluster) Restart(name string) error {
	c.mu.Lock()
	p, ok := c.procs[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	select {
	case <-p.exit:
	default:
		return fmt.Errorf("%s is still running", name)
	}
	return c.startProc(&proc{name: p.name, bin: p.bin, args: p.args})
}

// ExitCode returns a process's exit code once it exited (-1 if running).
func (c *Cluster) ExitCode(name string) int {
	c.mu.Lock()
	p, ok := c.procs[name]
	c.mu.Unlock()
	if !ok {
		return -1
	}
	select {
	case <-p.exit:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// PID returns the process ID of one process ("node-0", "app-0", ...).
func (c *Cluster) PID(name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[name]
	if !ok {
		return 0, fmt.Errorf("no process %q", name)
	}
	return p.cmd.Process.Pid, nil
}

// Stop drains every swd with SIGTERM (dispatcher first), then stops the
// apps, waiting up to timeout, and SIGKILLs whatever is left.
func (c *Cluster) Stop(timeout time.Duration) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	procs := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	deadline := time.Now().Add(timeout)
	stopGroup := func(match func(*proc) bool) {
		for _, p := range procs {
			if match(p) {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, p := range procs {
			if !match(p) {
				continue
			}
			select {
			case <-p.exit:
			case <-time.After(time.Until(deadline)):
				_ = p.cmd.Process.Kill()
				<-p.exit
			}
		}
	}
	stopGroup(func(p *proc) bool { return p.name == "dispatcher" })
	stopGroup(func(p *proc) bool { return p.bin == "swd" })
	stopGroup(func(p *proc) bool { return p.bin == "dummyapp" })
	close(c.done)
}

// FreeAddrs is FreePorts as 127.0.0.1:PORT addresses.
func FreeAddrs(n int) ([]string, error) {
	ports, err := FreePorts(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out, nil
}

// FreePorts returns n distinct ports that were free on 127.0.0.1 for both
// TCP and UDP when checked, and that it never returned before in this
// process. It picks them at random outside the kernel's ephemeral range
// (see portCandidates): bind(":0") and every outgoing connection on the
// machine take their local port from that range, so on a busy machine one
// of them could otherwise take a cluster's port between this check and the
// child's bind, or while a node is down for a restart.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	ranges := portCandidates(ephemeralRange())
	var out []int
	for tries := 0; len(out) < n && tries < n*50+100; tries++ {
		if port, ok := tryPort(pickPort(ranges)); ok && !portsUsed[port] {
			portsUsed[port] = true
			out = append(out, port)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("found only %d of %d free ports", len(out), n)
	}
	return out, nil
}
