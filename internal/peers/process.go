package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/swd-project/swd/internal/childproc"
)

// sbinDirs are searched after PATH: Debian installs daemons there, and a
// non-root PATH often lacks them.
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

// Find returns the path of prod's program, or an error wrapping
// ErrNotInstalled that says how to install it.
func Find(prod *Product) (string, error) {
	if p, err := exec.LookPath(prod.Binary); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, prod.Binary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s %w: no %s on PATH (install it with `sudo bash %s`, or apt-get install %s)",
		prod.Name, ErrNotInstalled, prod.Binary, prod.Ensure, prod.Package)
}

// prepare makes the process directory (a temporary one when dir is empty),
// picks a listen address when cfg has none, and writes the rendered
// configuration. It returns the directory, the configuration's path, cfg
// with Listen set, and whether the directory is temporary.
func prepare(p Peer, cfg Config) (dir, config string, out Config, temp bool, err error) {
	if err := cfg.Validate(); err != nil {
		return "", "", cfg, false, err
	}
	if p.Product == nil {
		return "", "", cfg, false, fmt.Errorf("peer %s has no product", p.Name)
	}
	dir = cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "swd-peer-"+p.Name+"-"); err != nil {
			return "", "", cfg, false, fmt.Errorf("peer directory: %w", err)
		}
		temp = true
	}
	fail := func(e error) (string, string, Config, bool, error) {
		if temp {
			_ = os.RemoveAll(dir)
		}
		return "", "", cfg, false, e
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fail(fmt.Errorf("peer directory: %w", err))
	}
	for _, sub := range append([]string{""}, p.Product.Subdirs...) {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return fail(fmt.Errorf("peer directory: %w", err))
		}
	}
	if cfg.Listen == "" {
		if cfg.Listen, err = freeAddr(); err != nil {
			return fail(err)
		}
	}
	text, err := Render(p, cfg, dir)
	if err != nil {
		return fail(err)
	}
	config = filepath.Join(dir, p.Product.ConfigFile)
	if err := os.WriteFile(config, text, 0o600); err != nil {
		return fail(fmt.Errorf("write %s configuration: %w", p.Name, err))
	}
	return dir, config, cfg, temp, nil
}

// freeAddr returns a loopback address whose TCP port was free when checked.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

// Check renders p's configuration for cfg and runs the product's own
// validator on it (haproxy -c, nginx -t, caddy validate). It returns the
// validator's output; err wraps ErrNotInstalled when the program is
// missing. A temporary directory (cfg.Dir empty) is removed afterwards.
func Check(ctx context.Context, p Peer, cfg Config) (string, error) {
	if p.Product == nil {
		return "", fmt.Errorf("peer %s has no product", p.Name)
	}
	bin, err := Find(p.Product)
	if err != nil {
		return "", err
	}
	dir, config, _, temp, err := prepare(p, cfg)
	if err != nil {
		return "", err
	}
	if temp {
		defer os.RemoveAll(dir)
	}
	cmd := exec.CommandContext(ctx, bin, p.Product.CheckArgs(dir, config)...)
	cmd.Env = env(p.Product, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s rejects the %s configuration: %w\n%s", p.Product.Name, p.Name, err, out)
	}
	return string(out), nil
}

func env(prod *Product, dir string) []string {
	e := os.Environ()
	if prod.Env != nil {
		e = append(e, prod.Env(dir)...)
	}
	return e
}

// Process is a running peer.
type Process struct {
	// Peer is what runs; Addr the host:port it serves clients on.
	Peer Peer
	Addr string
	// Dir holds its configuration, pid file, temporary files and Log.
	Dir string
	// Log is the file receiving the program's stdout and stderr.
	Log string

	cfg     Config
	cmd     *exec.Cmd
	temp    bool
	exited  chan struct{}
	waitErr error // valid once exited is closed

	stopOnce sync.Once
	stopErr  error
}

// Start runs p in front of cfg.Backends as a child process and waits until
// it serves (cfg.ReadyPath answered 2xx through it, or its port accepting
// connections). A missing program gives an error wrapping ErrNotInstalled.
func Start(ctx context.Context, p Peer, cfg Config) (*Process, error) {
	if p.Product == nil {
		return nil, fmt.Errorf("peer %s has no product", p.Name)
	}
	bin, err := Find(p.Product)
	if err != nil {
		return nil, err
	}
	if err := checkFileLimit(cfg.MaxConns); err != nil {
		return nil, fmt.Errorf("peer %s: %w", p.Name, err)
	}
	dir, config, cfg, temp, err := prepare(p, cfg)
	if err != nil {
		return nil, err
	}
	pr := &Process{Peer: p, Addr: cfg.Listen, Dir: dir, Log: filepath.Join(dir, p.Product.Name+".log"), cfg: cfg, temp: temp, exited: make(chan struct{})}
	logf, err := os.OpenFile(pr.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		pr.cleanup()
		return nil, fmt.Errorf("peer log: %w", err)
	}
	cmd := exec.Command(bin, p.Product.RunArgs(dir, config)...)
	cmd.Dir = dir
	cmd.Env = env(p.Product, dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (a terminal's Ctrl-C reaches only the
	// parent, which stops it); SIGTERM should the parent die.
	cmd.SysProcAttr = childproc.Attr(syscall.SIGTERM)
	pr.cmd = cmd
	err = childproc.Start(cmd)
	_ = logf.Close() // the child has its own descriptor
	if err != nil {
		pr.cleanup()
		return nil, fmt.Errorf("start %s (%s): %w", p.Name, bin, err)
	}
	go func() {
		pr.waitErr = cmd.Wait()
		close(pr.exited)
	}()
	if err := pr.waitReady(ctx); err != nil {
		_ = pr.Stop()
		return nil, err
	}
	return pr, nil
}

// checkFileLimit fails when maxConns connections (two descriptors each,
// client and server side) would not fit under the hard limit of open
// files: HAProxy refuses to start then.
func checkFileLimit(maxConns int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // unknown: let the program decide
	}
	need := uint64(2*maxConns + 256)
	if lim.Max != ^uint64(0) && need > lim.Max { // ^0: RLIM_INFINITY
		return fmt.Errorf("%d connections need about %d open files, above this machine's hard limit of %d: lower the connection limit", maxConns, need, lim.Max)
	}
	return nil
}

// waitReady polls the peer until it serves, it exits, or the ready timeout
// or ctx ends.
func (pr *Process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pr.cfg.ReadyTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	var last error
	for {
		select {
		case <-pr.exited:
			return fmt.Errorf("%s exited during start-up (%v); its log:\n%s", pr.Peer.Name, pr.waitErr, pr.LogTail(2000))
		default:
		}
		last = pr.probe(ctx, client)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not serving on %s within %v (last: %v); its log:\n%s", pr.Peer.Name, pr.Addr, pr.cfg.ReadyTimeout, last, pr.LogTail(2000))
		case <-pr.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (pr *Process) probe(ctx context.Context, client *http.Client) error {
	if pr.cfg.ReadyPath == "" {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", pr.Addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pr.Addr+pr.cfg.ReadyPath, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s answered %s", pr.cfg.ReadyPath, resp.Status)
	}
	return nil
}

// Exited is closed once the program has exited.
func (pr *Process) Exited() <-chan struct{} { return pr.exited }

// LogTail returns the last n bytes of the program's log.
func (pr *Process) LogTail(n int) string {
	b, err := os.ReadFile(pr.Log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop sends the program SIGTERM, waits up to the stop timeout, then kills
// its process group; it removes a temporary directory. It returns nil when
// the program stopped on the signal, and is idempotent.
func (pr *Process) Stop() error {
	pr.stopOnce.Do(func() {
		defer pr.cleanup()
		select {
		case <-pr.exited:
			pr.stopErr = fmt.Errorf("%s had already exited (%v); its log:\n%s", pr.Peer.Name, pr.waitErr, pr.LogTail(2000))
			return
		default:
		}
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(pr.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-pr.exited:
			if pr.waitErr != nil && !stoppedBy(pr.waitErr, syscall.SIGTERM) {
				pr.stopErr = fmt.Errorf("%s: %w", pr.Peer.Name, pr.waitErr)
			}
		case <-t.C:
			// The group's leader is not reaped yet, so its id is still ours.
			_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
			<-pr.exited
			pr.stopErr = fmt.Errorf("%s did not stop within %v of SIGTERM; killed it", pr.Peer.Name, pr.cfg.StopTimeout)
		}
	})
	return pr.stopErr
}

// stoppedBy reports whether err is the exit of a process that sig ended
// (or that exited 0 or 143 on it).
func stoppedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && (ws.Signaled() && ws.Signal() == sig || ws.ExitStatus() == 128+int(sig))
}

func (pr *Process) cleanup() {
	if pr.temp {
		_ = os.RemoveAll(pr.Dir)
	}
}
