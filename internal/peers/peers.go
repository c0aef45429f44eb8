package peers

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// ErrNotInstalled is returned when a peer's program is not on this machine.
var ErrNotInstalled = errors.New("not installed")

// ErrUnknownPeer is returned by Lookup for a name that is not registered.
var ErrUnknownPeer = errors.New("unknown peer")

//go:embed templates/*.tmpl
var templateFS embed.FS

// Product is a balancer program: how to find, configure, run and check it.
type Product struct {
	// Name is the product's name ("haproxy").
	Name string
	// Binary is the program looked up on PATH (and in /usr/sbin,
	// /usr/local/sbin, where Debian puts daemons).
	Binary string
	// Package is the Debian package; Ensure the project's script that
	// installs it (scripts/ensure-<product>.sh).
	Package string
	Ensure  string
	// ConfigFile is the rendered configuration's file name in the
	// process's directory; Template the template it is rendered from
	// (under templates/).
	ConfigFile string
	Template   string
	// CentralQueue says whether the product can send each server at most
	// m requests and queue the rest itself (Settings.CentralQueue).
	CentralQueue bool
	// RunArgs and CheckArgs are the command lines that run the product in
	// the foreground and check a configuration, for a process directory
	// dir and its configuration file config.
	RunArgs   func(dir, config string) []string
	CheckArgs func(dir, config string) []string
	// Env are extra environment variables for dir (keeping the product's
	// state out of the user's home).
	Env func(dir string) []string
	// Subdirs are created in dir before the product starts.
	Subdirs []string
}

// Settings make a system of a product.
type Settings struct {
	// Balance is the product's algorithm as its configuration spells it:
	// HAProxy's `balance leastconn`, nginx's `least_conn`, Caddy's
	// `lb_policy least_conn`.
	Balance string
	// CentralQueue sends each server at most Config.Concurrency requests
	// at once and queues the others in the balancer, first come first
	// served (HAProxy: `maxconn m` on every server, `timeout queue`).
	CentralQueue bool
	// BackendLines are extra directives of the backend (HAProxy's backend
	// section, nginx's upstream block, Caddy's reverse_proxy block), one a
	// line, e.g. "hash-type consistent".
	BackendLines []string
}

// Peer is one named system: a product with its settings.
type Peer struct {
	Name        string
	Description string
	Product     *Product
	Settings    Settings
}

// The products.
var (
	HAProxy = &Product{
		Name: "haproxy", Binary: "haproxy", Package: "haproxy", Ensure: "scripts/ensure-haproxy.sh",
		ConfigFile: "haproxy.cfg", Template: "haproxy.cfg.tmpl", CentralQueue: true,
		// -db: stay in the foreground, no daemon.
		RunArgs:   func(_, config string) []string { return []string{"-db", "-f", config} },
		CheckArgs: func(_, config string) []string { return []string{"-c", "-q", "-f", config} },
	}
	Nginx = &Product{
		Name: "nginx", Binary: "nginx", Package: "nginx", Ensure: "scripts/ensure-nginx.sh",
		ConfigFile: "nginx.conf", Template: "nginx.conf.tmpl",
		// -p: every relative path under dir; -e: the start-up error log
		// too (else /var/log/nginx).
		RunArgs: func(dir, config string) []string {
			return []string{"-p", dir + "/", "-c", config, "-e", filepath.Join(dir, "error.log")}
		},
		CheckArgs: func(dir, config string) []string {
			return []string{"-t", "-q", "-p", dir + "/", "-c", config, "-e", filepath.Join(dir, "error.log")}
		},
		Subdirs: []string{"tmp"},
	}
	Caddy = &Product{
		Name: "caddy", Binary: "caddy", Package: "caddy", Ensure: "scripts/ensure-caddy.sh",
		ConfigFile: "Caddyfile", Template: "Caddyfile.tmpl",
		RunArgs: func(_, config string) []string {
			return []string{"run", "--config", config, "--adapter", "caddyfile"}
		},
		CheckArgs: func(_, config string) []string {
			return []string{"validate", "--config", config, "--adapter", "caddyfile"}
		},
		Env: func(dir string) []string {
			return []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data")}
		},
		Subdirs: []string{"config", "data"},
	}
)

// HashHeader is the header haproxy-hash hashes: the key of a keyed
// workload (loadgen --keys, --key-header).
const HashHeader = "X-User"

var registry = map[string]Peer{}

// Register adds a peer. It panics on a duplicate name, a missing product or
// settings the product cannot honour (package initialisation only).
func Register(p Peer) {
	switch {
	case p.Name == "" || p.Product == nil || p.Settings.Balance == "":
		panic("peers: a peer needs a name, a product and a balancing algorithm")
	case p.Settings.CentralQueue && !p.Product.CentralQueue:
		panic("peers: " + p.Product.Name + " has no central queue")
	}
	if _, dup := registry[p.Name]; dup {
		panic("peers: duplicate peer " + p.Name)
	}
	registry[p.Name] = p
}

func init() {
	Register(Peer{Name: "haproxy-cq", Product: HAProxy,
		Description: "HAProxy, balance leastconn, maxconn m per server: the requests beyond wait in the backend's queue (one central queue)",
		Settings:    Settings{Balance: "leastconn", CentralQueue: true}})
	Register(Peer{Name: "haproxy-leastconn", Product: HAProxy,
		Description: "HAProxy, balance leastconn, no maxconn: every request goes to a server at once (the queues are at the apps)",
		Settings:    Settings{Balance: "leastconn"}})
	Register(Peer{Name: "haproxy-hash", Product: HAProxy,
		Description: "HAProxy, consistent hashing on the X-User header with bounded load (hash-balance-factor 125): the reference for key affinity",
		Settings:    Settings{Balance: "hdr(" + HashHeader + ")", BackendLines: []string{"hash-type consistent", "hash-balance-factor 125"}}})
	Register(Peer{Name: "nginx-leastconn", Product: Nginx,
		Description: "nginx, least_conn over one shared zone: every request goes to an app at once",
		Settings:    Settings{Balance: "least_conn"}})
	Register(Peer{Name: "caddy-leastconn", Product: Caddy,
		Description: "Caddy reverse_proxy, lb_policy least_conn: every request goes to an app at once",
		Settings:    Settings{Balance: "least_conn"}})
}

// Lookup returns the peer registered under name.
func Lookup(name string) (Peer, error) {
	p, ok := registry[name]
	if !ok {
		return Peer{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownPeer, name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the registered peers, sorted.
func Names() []string { return slices.Sorted(maps.Keys(registry)) }

// Config is one start of a peer.
type Config struct {
	// Listen is the loopback host:port the peer serves clients on; empty
	// picks a free port on 127.0.0.1.
	Listen string
	// Backends are the apps' host:port addresses.
	Backends []string
	// Concurrency is m: with Settings.CentralQueue, the most requests a
	// server gets at once.
	Concurrency int
	// Threads is the product's threads or worker processes (HAProxy
	// nbthread, nginx worker_processes); 0 means one per CPU.
	Threads int
	// MaxConns bounds the connections the peer holds (HAProxy maxconn,
	// nginx worker_connections). HAProxy needs two file descriptors per
	// connection and refuses to start when they exceed the hard limit of
	// open files.
	MaxConns int
	// Timeout bounds waiting for an app's answer; QueueTimeout a request's
	// wait in a central queue.
	Timeout      time.Duration
	QueueTimeout time.Duration
	// Dir holds the configuration, pid file, temporary files and log; empty
	// makes a temporary directory that Stop removes.
	Dir string
	// ReadyPath is requested through the peer until it answers 2xx before
	// Start returns (an app endpoint, e.g. /healthz); empty waits only for
	// the port to accept connections.
	ReadyPath string
	// ReadyTimeout bounds the wait for readiness; StopTimeout the wait for
	// the process to exit after SIGTERM, before SIGKILL.
	ReadyTimeout time.Duration
	StopTimeout  time.Duration
}

// DefaultConfig is m = 1, 8,000 connections, a 60 s answer timeout and a
// 30 s queue timeout (swd's --queue-timeout), ready when /healthz passes.
// Backends must still be set.
func DefaultConfig() Config {
	return Config{
		Concurrency:  1,
		MaxConns:     8000,
		Timeout:      60 * time.Second,
		QueueTimeout: 30 * time.Second,
		ReadyPath:    "/healthz",
		ReadyTimeout: 20 * time.Second,
		StopTimeout:  10 * time.Second,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case len(c.Backends) == 0:
		return errors.New("a peer needs at least one backend (the apps' host:port)")
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.Threads < 0:
		return fmt.Errorf("threads must be 0 (one per CPU) or more, got %d", c.Threads)
	case c.MaxConns < 16:
		return fmt.Errorf("max connections must be at least 16, got %d", c.MaxConns)
	case c.Timeout < time.Millisecond || c.QueueTimeout < time.Millisecond:
		return errors.New("timeout and queue timeout must be at least 1ms")
	case c.ReadyTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("ready and stop timeouts must be positive")
	case c.ReadyPath != "" && !strings.HasPrefix(c.ReadyPath, "/"):
		return fmt.Errorf("ready path %q must start with /", c.ReadyPath)
	}
	if c.Listen != "" {
		if err := checkHostPort("listen address", c.Listen); err != nil {
			return err
		}
	}
	for _, b := range c.Backends {
		if err := checkHostPort("backend", b); err != nil {
			return err
		}
	}
	return nil
}

// checkHostPort accepts host:port with a numeric port and no characters
// that could escape a configuration line.
func checkHostPort(what, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port: %w", what, s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s %q: port must be 1-65535", what, s)
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n;{}#\"'\\") {
		return fmt.Errorf("%s %q: bad host", what, s)
	}
	return nil
}

// templateData is what a template sees.
type templateData struct {
	Peer   Peer
	Config Config
	// Dir is the process directory (absolute).
	Dir string
	// ListenHost and ListenPort split Config.Listen.
	ListenHost, ListenPort string
}

var funcs = template.FuncMap{
	// ms renders a duration as whole milliseconds ("30000ms"), a form
	// HAProxy, nginx and Caddy all read.
	"ms":  func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" },
	"add": func(a, b int) int { return a + b },
}

var templates = template.Must(template.New("").Option("missingkey=error").Funcs(funcs).ParseFS(templateFS, "templates/*.tmpl"))

// Render returns p's configuration for cfg in directory dir (absolute).
// cfg.Listen must be set; cfg.Threads 0 becomes one per CPU.
func Render(p Peer, cfg Config, dir string) ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p.Product == nil {
		return nil, fmt.Errorf("peer %s has no product", p.Name)
	}
	if cfg.Listen == "" {
		return nil, errors.New("render needs a listen address")
	}
	if !filepath.IsAbs(dir) || strings.ContainsAny(dir, " \t\r\n;{}#\"'\\") {
		return nil, fmt.Errorf("peer directory %q must be an absolute path without spaces or quotes", dir)
	}
	for _, l := range p.Settings.BackendLines {
		if strings.ContainsAny(l, "\r\n") {
			return nil, fmt.Errorf("peer %s: a backend line must be one line", p.Name)
		}
	}
	if cfg.Threads == 0 {
		cfg.Threads = runtime.NumCPU()
	}
	host, port, _ := net.SplitHostPort(cfg.Listen)
	var b bytes.Buffer
	err := templates.ExecuteTemplate(&b, p.Product.Template, templateData{Peer: p, Config: cfg, Dir: dir, ListenHost: host, ListenPort: port})
	if err != nil {
		return nil, fmt.Errorf("render %s for %s: %w", p.Product.Template, p.Name, err)
	}
	return b.Bytes(), nil
}
