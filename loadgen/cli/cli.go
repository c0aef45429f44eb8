// Package cli is the loadgen command line (cobra): run, sweep, compare,
// sim and capacity, on top of package loadgen.
//
// Every flag also reads LOADGEN_<FLAG> from the environment and may be set
// by the YAML file named by --config (internal/config; flags win over the
// environment, the environment over the file).
//
// Exit codes: 0 success, 1 a failure while measuring or writing, 2 a usage
// error (bad flag, bad value); the message says what to change.
//
// Concurrency: Main may run concurrently with different writers; a command
// tree from NewCommand is for one execution.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swd-project/swd/internal/config"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "LOADGEN"

// usageError is a mistake in the command line or configuration.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// env is what the commands need from the outside world.
type env struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
}

// Main runs loadgen with args (without the program name) and returns the
// process exit code. lookupEnv is usually os.LookupEnv (nil means that).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	root := NewCommand(stdout, stderr, lookupEnv)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "loadgen: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "see '%s --help'\n", cmd.CommandPath())
		return 2
	}
	return 1
}

// NewCommand builds the loadgen command tree.
func NewCommand(stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) *cobra.Command {
	// stderr is written by the sweep's progress and by swdctl's output
	// copier at once; a file is safe for that, anything else gets a lock.
	if _, isFile := stderr.(*os.File); !isFile {
		stderr = &lockedWriter{w: stderr}
	}
	e := &env{stdout: stdout, stderr: stderr, lookupEnv: lookupEnv}
	root := &cobra.Command{
		Use:   "loadgen",
		Short: "open-loop load, sweeps, policy comparisons, capacity and simulation for SWD",
		Long: `loadgen offers the paper's workloads (standard, dispersed, burst, or custom) to an
SWD cluster in an open loop, sweeps arrival rates, compares policies by switching
the cluster live, computes x-th percentile capacities and simulates.

Every flag also reads LOADGEN_<FLAG> (dashes as underscores) and may be set in the
YAML file given by --config; flags win over the environment, the environment over
the file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.LoadFlags(cmd.Flags(), EnvPrefix, e.lookupEnv); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	config.AddConfigFlag(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRunCommand(e), newSweepCommand(e), newCompareCommand(e), newSimCommand(e), newCapacityCommand(e), newSessionsCommand(e))
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	}
	return root
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.Name(), strings.Join(args, " "))
	}
	return nil
}

// changed reports whether a flag was set (command line, environment or
// file).
func changed(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
