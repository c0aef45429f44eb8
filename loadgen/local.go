package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swd-project/swd/internal/childproc"
)

// LocalConfig starts a loopback cluster with `swdctl local up`.
type LocalConfig struct {
	// Swdctl is the swdctl binary.
	Swdctl string
	// Nodes is how many swd (and dummyapp) to start.
	Nodes int
	// AppMode is dummyapp's mode, "sleep" or "busy".
	AppMode string
	// Dispatcher also starts a dispatcher (for rr, ct).
	Dispatcher bool
	// Concurrency is every node's m; AppConcurrency every dummyapp's
	// worker count (0: no limit). Equal, they give the apps the capacity
	// swd assumes whoever sends to them (peers such as nginx do not bound
	// what they send).
	Concurrency    int
	AppConcurrency int
	// ExtraArgs are appended to swdctl's arguments.
	ExtraArgs []string
	// ReadyTimeout bounds the wait for the address line; StopTimeout the
	// wait after SIGINT before the process group is killed.
	ReadyTimeout time.Duration
	StopTimeout  time.Duration
	// Stderr receives swdctl's stderr (nil: discarded).
	Stderr io.Writer
}

// DefaultLocalConfig is 16 sleeping nodes and a dispatcher, from
// bin/swdctl (or swdctl on PATH when that does not exist).
func DefaultLocalConfig() LocalConfig {
	return LocalConfig{
		Swdctl:         "bin/swdctl",
		Nodes:          16,
		AppMode:        "sleep",
		Dispatcher:     true,
		Concurrency:    1,
		AppConcurrency: 1,
		ReadyTimeout:   60 * time.Second,
		StopTimeout:    15 * time.Second,
	}
}

// Validate reports the first problem with c.
func (c LocalConfig) Validate() error {
	switch {
	case c.Swdctl == "":
		return errors.New("no swdctl binary given (use --swdctl PATH)")
	case c.Nodes < 1:
		return fmt.Errorf("a local cluster needs at least 1 node, got %d", c.Nodes)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency (m) must be at least 1, got %d", c.Concurrency)
	case c.AppConcurrency < 0:
		return fmt.Errorf("app concurrency must be 0 (no limit) or more, got %d", c.AppConcurrency)
	case c.AppMode != "sleep" && c.AppMode != "busy":
		return fmt.Errorf("app mode must be sleep or busy, got %q", c.AppMode)
	case c.ReadyTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("ready and stop timeouts must be positive")
	}
	return nil
}

// Args are swdctl's arguments.
func (c LocalConfig) Args() []string {
	args := []string{"local", "up", "--nodes", strconv.Itoa(c.Nodes), "--app-mode", c.AppMode, "--concurrency", strconv.Itoa(c.Concurrency)}
	if c.AppConcurrency > 0 {
		args = append(args, "--app-concurrency", strconv.Itoa(c.AppConcurrency))
	}
	if c.Dispatcher {
		args = append(args, "--dispatcher")
	}
	return append(args, c.ExtraArgs...)
}

// LocalNode is one node of a local cluster, as swdctl prints it.
type LocalNode struct {
	Name  string `json:"name"`
	HTTP  string `json:"http"`
	GRPC  string `json:"grpc"`
	Admin string `json:"admin"`
	App   string `json:"app"`
}

// LocalEndpoint is the dispatcher of a local cluster.
type LocalEndpoint struct {
	HTTP string `json:"http"`
	GRPC string `json:"grpc"`
}

// LocalAddrs is swdctl's address line.
type LocalAddrs struct {
	Nodes      []LocalNode    `json:"nodes"`
	Dispatcher *LocalEndpoint `json:"dispatcher,omitempty"`
}

// ParseLocalAddrs parses swdctl's address line.
func ParseLocalAddrs(line []byte) (LocalAddrs, error) {
	var a LocalAddrs
	if err := json.Unmarshal(line, &a); err != nil {
		return a, fmt.Errorf("swdctl address line is not JSON: %w", err)
	}
	if len(a.Nodes) == 0 {
		return a, errors.New("swdctl address line lists no nodes")
	}
	for i, n := range a.Nodes {
		if n.HTTP == "" || n.GRPC == "" {
			return a, fmt.Errorf("swdctl address line: node %d lacks its http or grpc address", i)
		}
	}
	if a.Dispatcher != nil && a.Dispatcher.HTTP == "" {
		return a, errors.New("swdctl address line: the dispatcher lacks its http address")
	}
	return a, nil
}

// LocalCluster is a running `swdctl local up`. Close stops it.
type LocalCluster struct {
	LocalAddrs
	cfg  LocalConfig
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done

	closeOnce sync.Once
	closeErr  error
}

// StartLocal starts swdctl and waits for its address line.
func StartLocal(ctx context.Context, cfg LocalConfig) (*LocalCluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin, err := findSwdctl(cfg.Swdctl)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, cfg.Args()...)
	// Its own process group: a terminal's Ctrl-C reaches only loadgen,
	// which then stops swdctl with one SIGINT; should loadgen die without
	// stopping it, swdctl gets SIGINT anyway (parent-death signal, Linux)
	// and stops its cluster.
	cmd.SysProcAttr = childproc.Attr(syscall.SIGINT)
	if cfg.Stderr != nil {
		cmd.Stderr = cfg.Stderr
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Swdctl, err)
	}
	c := &LocalCluster{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	ready := make(chan LocalAddrs, 1)
	scanned := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		sent := false
		var last error
		for sc.Scan() {
			if sent {
				continue // keep draining so swdctl never blocks on stdout
			}
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "{") {
				continue
			}
			a, err := ParseLocalAddrs([]byte(line))
			if err != nil {
				last = err
				continue
			}
			ready <- a
			sent = true
		}
		if last == nil {
			last = sc.Err()
		}
		scanned <- last
		c.err = cmd.Wait()
		close(c.done)
	}()
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case a := <-ready:
		if cfg.Dispatcher && a.Dispatcher == nil {
			_ = c.Close()
			return nil, errors.New("swdctl started no dispatcher although one was asked for")
		}
		c.LocalAddrs = a
		return c, nil
	case err := <-scanned:
		<-c.done
		msg := fmt.Sprintf("swdctl exited before printing its addresses (%v)", c.err)
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, errors.New(msg)
	case <-timer.C:
		_ = c.Close()
		return nil, fmt.Errorf("swdctl printed no addresses within %v (raise --local-timeout)", cfg.ReadyTimeout)
	case <-ctx.Done():
		_ = c.Close()
		return nil, ctx.Err()
	}
}

// findSwdctl returns path if it exists, else swdctl from PATH when path is
// the default bin/swdctl.
func findSwdctl(path string) (string, error) {
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if p, err := exec.LookPath(path); err == nil {
		return p, nil
	}
	if path == DefaultLocalConfig().Swdctl {
		if p, err := exec.LookPath("swdctl"); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("swdctl not found at %s (build it with `make build`, or pass --swdctl PATH)", path)
}

// Targets are the nodes' HTTP addresses.
func (c *LocalCluster) Targets() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.HTTP
	}
	return out
}

// Apps are the nodes' apps' addresses (host:port), or an error when swdctl
// did not report them.
func (c *LocalCluster) Apps() ([]string, error) {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		if n.App == "" {
			return nil, fmt.Errorf("swdctl did not report node %s's app address", n.Name)
		}
		out[i] = n.App
	}
	return out, nil
}

// Control is the first node's gRPC address.
func (c *LocalCluster) Control() string { return c.Nodes[0].GRPC }

// DispatcherHTTP and DispatcherGRPC are the dispatcher's addresses ("" if
// none).
func (c *LocalCluster) DispatcherHTTP() string {
	if c.Dispatcher == nil {
		return ""
	}
	return c.Dispatcher.HTTP
}

// DispatcherGRPC is the dispatcher's gRPC address ("" if none).
func (c *LocalCluster) DispatcherGRPC() string {
	if c.Dispatcher == nil {
		return ""
	}
	return c.Dispatcher.GRPC
}

// Done is closed once swdctl has exited.
func (c *LocalCluster) Done() <-chan struct{} { return c.done }

// Close sends swdctl SIGINT and waits for it to stop everything it
// started; after StopTimeout it kills swdctl's process group. It returns
// nil when swdctl exited cleanly after the signal.
func (c *LocalCluster) Close() error {
	c.closeOnce.Do(func() {
		select {
		case <-c.done:
			c.closeErr = fmt.Errorf("swdctl had already exited: %v", c.err)
			return
		default:
		}
		if err := interrupt(c.cmd); err != nil {
			c.closeErr = fmt.Errorf("interrupt swdctl: %w", err)
		}
		t := time.NewTimer(c.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-c.done:
			if c.err != nil && c.closeErr == nil && !interruptedExit(c.err) {
				c.closeErr = fmt.Errorf("swdctl: %w", c.err)
			}
		case <-t.C:
			killGroup(c.cmd)
			<-c.done
			c.closeErr = fmt.Errorf("swdctl did not stop within %v of SIGINT; killed it and its children", c.cfg.StopTimeout)
		}
	})
	return c.closeErr
}
