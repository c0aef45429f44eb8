package node

import (
	"context"
	"errors"

	"github.com/swd-project/swd/internal/admission"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/route"
)

// admissionState is a node's overload control (--admission page|sqs,
// internal/admission, docs/admission.md): the page scheduler and, with
// sqs, the session gate. nil with --admission none.
type admissionState struct {
	sched *admission.Scheduler
	gate  *admission.Gate // nil unless sqs
	stop  context.CancelFunc
}

// validateAdmission checks the admission settings of a derived config
// (called from validate).
func (c Config) validateAdmission() error {
	if err := c.Admission.Validate(); err != nil {
		return err
	}
	on := c.Admission.Mode == admission.ModePage || c.Admission.Mode == admission.ModeSQS
	switch {
	case on && c.Role != "node":
		return errors.New("--admission page|sqs applies to nodes (--role node), not to a dispatcher")
	case on && c.Cohort.Enabled:
		return errors.New("--admission page|sqs and --cohort each install the queue's scheduler (per-route limits or the cache-aware order), and only one runs at a time: choose one")
	case on && c.Queue.Scheduler != nil:
		return errors.New("--admission page|sqs installs the queue's scheduler, but one is already set")
	}
	return nil
}

// installAdmission puts the page scheduler on a node's queue
// configuration (before the queue is built) and builds the session gate.
func (n *Node) installAdmission(qc *queue.Config) error {
	mode := n.cfg.Admission.Mode
	if mode != admission.ModePage && mode != admission.ModeSQS {
		return nil
	}
	// The route table is built later (newCostState) from the same config;
	// its size is known now.
	rc := n.cfg.Routes
	maxRoutes := len(rc.Patterns) + 1 + rc.MaxLearnt
	s, err := admission.NewScheduler(n.cfg.Admission, maxRoutes, n.Concurrency)
	if err != nil {
		return err
	}
	qc.Scheduler = s
	n.adm = &admissionState{sched: s}
	if mode == admission.ModeSQS {
		g, err := admission.NewGate(n.cfg.Admission, func() float64 { return float64(n.waiting()) })
		if err != nil {
			return err
		}
		n.adm.gate = g
	}
	return nil
}

// startAdmission hands the gate to the proxy and runs its adaptation until
// the node stops.
func (n *Node) startAdmission() {
	if n.adm == nil {
		return
	}
	n.m.RegisterAdmission(metrics.AdmissionLive{RouteLimits: n.routeLimits, Sessions: n.sessionStats})
	if n.adm.gate == nil {
		return
	}
	n.h.SetAdmitter(n.adm.gate)
	ctx, cancel := context.WithCancel(context.Background())
	n.adm.stop = cancel
	go func() {
		select {
		case <-n.stopRun:
			cancel()
		case <-ctx.Done():
		}
	}()
	go n.adm.gate.Run(ctx)
}

// routeLimits is swd_route_limit: each route's learnt limit, by name.
func (n *Node) routeLimits() map[string]float64 {
	if n.adm == nil || n.cost == nil {
		return nil
	}
	out := map[string]float64{}
	for id, l := range n.adm.sched.Limits() {
		if name := n.cost.routes.Name(route.ID(id)); name != "" {
			out[name] = float64(l)
		}
	}
	return out
}

// sessionStats feeds swd_sessions_total, swd_session_queue_length and
// swd_session_interval_seconds (ok false without sqs).
func (n *Node) sessionStats() (st metrics.SessionStats, ok bool) {
	if n.adm == nil || n.adm.gate == nil {
		return st, false
	}
	g := n.adm.gate.Stats()
	return metrics.SessionStats{Admitted: g.Admitted, Refused: g.Refused, Queue: g.Queue, Interval: g.Interval.Seconds()}, true
}
