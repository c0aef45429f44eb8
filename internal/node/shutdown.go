package node

import (
	"context"
	"errors"
	"time"
)

// Shutdown drains the daemon gracefully, as on SIGTERM: it stops admitting
// (new requests get 503, new transfers are refused), stops accepting
// connections, keeps handing waiting requests to peers while a transfer
// policy is active, waits for queued and in-flight work up to DrainTimeout
// (or ctx), answers whatever is still waiting with 503, leaves the cluster
// and stops. It is idempotent; later calls return the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.draining.Store(true)
	n.log.Info("draining", "waiting", n.waiting(), "in_flight", n.inFlight(), "timeout", n.cfg.DrainTimeout.String())
	if n.q != nil {
		n.q.Drain()
	}
	if n.cl != nil {
		n.cl.Mute() // peers stop planning transfers to us within StaleAfter
	}
	close(n.drainCh)
	dctx, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
	defer cancel()
	httpDone := make(chan error, 1)
	if n.httpSrv != nil {
		go func() { httpDone <- n.httpSrv.Shutdown(dctx) }()
	} else {
		httpDone <- nil
	}
	var errs []error
	if n.q != nil {
		if err := n.q.WaitIdle(dctx); err != nil {
			evicted := n.q.Evict()
			n.log.Warn("drain timed out; answering the rest with 503", "evicted", evicted, "in_flight", n.q.InFlight())
		}
	}
	select {
	case err := <-httpDone:
		if err != nil {
			// Handlers still running (in flight to the app past the
			// deadline): give them a moment, then cut their connections.
			grace, gcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.httpSrv.Shutdown(grace)
			gcancel()
			_ = n.httpSrv.Close()
		}
	case <-time.After(n.cfg.DrainTimeout + 5*time.Second):
		_ = n.httpSrv.Close()
	}
	close(n.stopRun)
	if n.runnerStarted.Load() {
		<-n.runDone
	}
	if n.cl != nil {
		if err := n.cl.Leave(2 * time.Second); err != nil {
			n.log.Warn("leave cluster", "err", err)
		}
	}
	if n.grpcSrv != nil {
		done := make(chan struct{})
		go func() { n.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			n.grpcSrv.Stop()
		}
	}
	if n.cl != nil {
		if err := n.cl.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.adminSrv != nil {
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		_ = n.adminSrv.Shutdown(actx)
		acancel()
	}
	_ = n.tc.Close()
	n.closeListeners()
	n.log.Info("stopped")
	return errors.Join(errs...)
}
