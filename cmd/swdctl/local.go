package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/tlsutil"
)

func localCmd(_ *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "local", Short: "Run a local SWD cluster on loopback"}
	cfg := localcluster.DefaultConfig()
	up := &cobra.Command{
		Use:   "up",
		Short: "Start N swd + N dummyapp (and a dispatcher) on free loopback ports until interrupted",
		Long: `up starts the cluster, prints its addresses as one line of JSON once every
node sees every other, and runs until SIGINT or SIGTERM; then it drains and
stops every process it started. Children are bound to this process: if it is
killed, they die too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go func() {
				select {
				case <-sigs: // interrupted during start-up
					cancel()
				case <-ctx.Done():
				}
			}()
			c, err := localcluster.Start(ctx, cfg)
			if err != nil {
				return err
			}
			cancel()
			defer c.Stop(15 * time.Second)
			b, err := json.Marshal(c.Info)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			<-sigs
			fmt.Fprintln(cmd.ErrOrStderr(), "stopping local cluster")
			return nil
		},
	}
	f := up.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of nodes")
	f.StringVar(&cfg.AppMode, "app-mode", cfg.AppMode, "dummyapp mode: sleep or busy")
	f.BoolVar(&cfg.Dispatcher, "dispatcher", false, "also start a dispatcher (for rr and ct)")
	f.StringVar(&cfg.Policy, "policy", cfg.Policy, "initial policy of every node")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "m of every node")
	f.IntVar(&cfg.AppConcurrency, "app-concurrency", 0, "most requests each dummyapp serves at once, the others wait in arrival order (0: no limit; set it to --concurrency to compare with balancers that do not bound what they send)")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "directory holding swd and dummyapp (default: next to swdctl)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "write each process's log to a file here")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "how long to wait for every node to see every other")
	f.StringVar(&cfg.ControlToken, "control-token", "", "control token for every swd (and for the launcher's readiness checks)")
	f.StringArrayVar(&cfg.SwdArgs, "swd-arg", nil, "extra flag for every swd (repeatable), e.g. --swd-arg=--queue-limit=64")
	f.StringArrayVar(&cfg.NodeArgs, "node-arg", nil, "extra flag for every node's swd but not the dispatcher's (repeatable), e.g. --node-arg=--affinity=header:X-User")
	f.StringArrayVar(&cfg.AppArgs, "app-arg", nil, "extra flag for every dummyapp (repeatable), e.g. --app-arg=--cache-size=50")
	cmd.AddCommand(up)
	return cmd
}

func certsCmd(_ *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "certs", Short: "Development certificates for mTLS"}
	var dir string
	var hosts []string
	initCmd := &cobra.Command{
		Use:   "init NAME...",
		Short: "Create a development CA and a certificate per NAME (for nodes and clients)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := tlsutil.InitDev(dir, args, hosts)
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(cmd.OutOrStdout(), f)
			}
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "certs", "directory to write into")
	initCmd.Flags().StringSliceVar(&hosts, "host", nil, "extra DNS names or IPs for every certificate")
	cmd.AddCommand(initCmd)
	return cmd
}
