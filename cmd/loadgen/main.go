// Command loadgen offers SWD's workloads to a cluster in an open loop,
// sweeps rates, compares policies, computes capacities and simulates; see
// package github.com/swd-project/swd/loadgen/cli, or `loadgen --help`.
//
// The first SIGINT or SIGTERM stops the sweep, prints what was measured
// and stops a --local cluster; a second one kills loadgen at once.
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
	go func() {
		<-ctx.Done()
		stop() // the next signal gets the default behaviour: exit now
	}()
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
