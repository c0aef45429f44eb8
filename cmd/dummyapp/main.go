// Command dummyapp is SWD's stand-in application: it spends a requested
// service time per request, burning CPU (--mode busy) or sleeping
// (--mode sleep). See package internal/dummyapp for the endpoints.
//
//	dummyapp --listen :9000 --mode busy|sleep [--name N] [--cache-size N --miss-ms X] [--config FILE]
//
// Every flag also reads DUMMYAPP_<FLAG> (e.g. DUMMYAPP_MODE) and may be set
// in the --config YAML file; flags win over environment, environment over
// file. It stops gracefully on SIGTERM or SIGINT and then exits 0.
//
// Exit codes: 0 after a graceful stop, 1 on a runtime or configuration
// error, 2 on a command-line usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/config"
	"github.com/swd-project/swd/internal/cpuset"
	"github.com/swd-project/swd/internal/dummyapp"
)

// envPrefix is the prefix of dummyapp's environment variables.
const envPrefix = "DUMMYAPP"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// usageError marks errors in the command line (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes dummyapp with args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	cmd := newCommand(stderr, lookupEnv)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "dummyapp: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "run 'dummyapp --help' for usage\n")
		return 2
	}
	return 1
}

// routeFlag is --route: repeatable RouteSpecs.
type routeFlag struct{ specs *[]dummyapp.RouteSpec }

func (f *routeFlag) String() string {
	if f.specs == nil {
		return ""
	}
	var s []string
	for _, rs := range *f.specs {
		s = append(s, rs.String())
	}
	return strings.Join(s, " ")
}

func (f *routeFlag) Set(v string) error {
	rs, err := dummyapp.ParseRouteSpec(v)
	if err != nil {
		return err
	}
	*f.specs = append(*f.specs, rs)
	return nil
}

func (f *routeFlag) Type() string { return "PATH=MS[,knee=K][,power=P]" }

func newCommand(stderr io.Writer, lookupEnv func(string) (string, bool)) *cobra.Command {
	cfg := dummyapp.DefaultConfig()
	mode := string(cfg.Mode)
	var cpus string
	cmd := &cobra.Command{
		Use:   "dummyapp",
		Short: "Stand-in application: spends a requested service time per request",
		Long: `dummyapp answers GET /work?ms=37.5 after spending 37.5 ms of service time,
burning CPU in a calibrated loop (--mode busy) or holding the request without CPU
(--mode sleep). GET /stats, POST /stats/reset and GET /healthz report on it.

Every flag --foo-bar also reads DUMMYAPP_FOO_BAR, and --config FILE (YAML,
keys are flag names) may set any of them; flags win over environment,
environment over file.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unexpected arguments %q: dummyapp takes only flags", args)}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.LoadFlags(cmd.Flags(), envPrefix, lookupEnv); err != nil {
				return err
			}
			cfg.Mode = dummyapp.Mode(mode)
			if err := cfg.Validate(); err != nil {
				return err
			}
			logger, err := dummyapp.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return err
			}
			if cpus != "" { // before busy mode calibrates its loop
				set, err := cpuset.Parse(cpus)
				if err != nil {
					return usageError{fmt.Errorf("--cpus: %w", err)}
				}
				if err := cpuset.Apply(set); err != nil {
					return fmt.Errorf("--cpus: %w", err)
				}
				logger.Info("pinned to CPUs", "cpus", cpuset.Format(set))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			app, err := dummyapp.New(cfg, logger)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			return app.Serve(ctx, ln)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP address to listen on (port 0: any free port)")
	fs.StringVar(&mode, "mode", mode, "how to spend service time: busy (calibrated CPU loop) or sleep (timer, no CPU)")
	fs.StringVar(&cfg.Name, "name", "", "name sent in the X-Served-By header (default: host name)")
	fs.Float64Var(&cfg.MaxMs, "max-ms", cfg.MaxMs, "largest service time a request may ask for, in ms")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "most /work requests served at once (a server with that many workers); the others wait in arrival order; 0: no limit")
	fs.IntVar(&cfg.QueueLimit, "queue-limit", cfg.QueueLimit, "with --concurrency, most requests waiting for a worker; beyond it 503")
	fs.IntVar(&cfg.CacheSize, "cache-size", cfg.CacheSize, "cache mode: keep an LRU of this many keys (header --cache-header); 0: off")
	fs.Float64Var(&cfg.MissMs, "miss-ms", cfg.MissMs, "cache mode: extra service time of a request whose key is not cached, in ms")
	fs.StringVar(&cfg.CacheHeader, "cache-header", cfg.CacheHeader, "cache mode: the header carrying a request's key")
	fs.Var(&routeFlag{&cfg.Routes}, "route", "a path with its own service time and contention model: PATH=MS[,knee=K][,power=P] (repeatable); beyond K running at once a request of it takes MS*(n/K)^P")
	fs.StringVar(&cfg.SessionCookie, "session-cookie", "", "set this cookie (a fresh random value) on a --route answer to a request without it: a session's first page")
	fs.DurationVar(&cfg.Calibration, "calibration", cfg.Calibration, "how long busy mode calibrates its loop at start")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "longest wait for requests in progress on SIGTERM/SIGINT")
	fs.StringVar(&cpus, "cpus", "", "pin the app's threads to these CPUs (Linux), e.g. 1 or 1-3, to keep it off swd's cores; empty: no pinning")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json")
	config.AddConfigFlag(fs)
	return cmd
}
