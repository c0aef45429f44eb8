// Command loadgen offers SWD's workloads to a cluster in an open loop,
// sweeps rates, compares policies, computes capacities and simulates; see
// package github.com/swd-project/swd/loadgen/cli, or `loadgen --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/swd-project/swd/loadgen/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
