package proxy

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// Backend is a node a dispatcher can send requests to.
type Backend struct {
	Name     string
	GRPCAddr string
	// Concurrency is the node's m (the requests its app serves at once),
	// from its gossiped entry; below 1 counts as 1. Only holding policies
	// (cq) read it.
	Concurrency int
}

// DispatchDecision records one dispatch, for tests and debugging: the exact
// outstanding counts the picker saw (in Backends order) and its choice.
type DispatchDecision struct {
	Backends    []string
	Outstanding []int
	Chosen      int
}

// DispatcherConfig configures a Dispatcher. Validate's messages name the
// swd flag that sets each field.
type DispatcherConfig struct {
	// NodeName is the dispatcher's name (sent as every forward's sender).
	NodeName string
	// MaxTransferBody is the largest request body the dispatcher buffers
	// and forwards; beyond it, 413. Default 1 MiB.
	MaxTransferBody int64
	// IdempotentMethods may be sent to a second node when the first failed
	// after it may have started them. Default GET, HEAD, OPTIONS.
	IdempotentMethods []string
	// RetryAfter is the Retry-After advice on 503 answers. Default 1s.
	RetryAfter time.Duration
	// TransferTimeout bounds each forward, from dispatch to the end of the
	// node's answer. Default 60s.
	TransferTimeout time.Duration
	// HoldLimit is the most requests a holding policy (cq) keeps waiting
	// in the dispatcher's FIFO; an arrival beyond it is answered 503 with
	// Retry-After. swd sets it from --queue-limit. Default 1024.
	HoldLimit int
	// HoldTimeout is the longest a request waits in that FIFO, counted
	// from its arrival; beyond it, 503. swd sets it from --queue-timeout.
	// Default 30s.
	HoldTimeout time.Duration
	// Logger receives warnings; nil discards them.
	Logger *slog.Logger
}

// DefaultDispatcherConfig returns the defaults, the same as a node's front
// (DefaultConfig) for the settings they share.
func DefaultDispatcherConfig() DispatcherConfig {
	c := DefaultConfig()
	return DispatcherConfig{
		MaxTransferBody:   c.MaxTransferBody,
		IdempotentMethods: c.IdempotentMethods,
		RetryAfter:        c.RetryAfter,
		TransferTimeout:   c.TransferTimeout,
		HoldLimit:         1024,
		HoldTimeout:       30 * time.Second,
	}
}

// Validate reports the first problem with c.
func (c DispatcherConfig) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("dispatcher: node name is required")
	case c.MaxTransferBody < 0:
		return fmt.Errorf("--max-transfer-body must not be negative, got %d", c.MaxTransferBody)
	case c.HoldLimit < 1:
		return fmt.Errorf("--queue-limit must be at least 1 (it bounds a holding dispatcher's FIFO), got %d", c.HoldLimit)
	case c.HoldTimeout <= 0 || c.HoldTimeout > 24*time.Hour:
		return fmt.Errorf("--queue-timeout must be positive and at most 24h (it bounds a wait in a holding dispatcher's FIFO), got %s", c.HoldTimeout)
	}
	return validateForwarding(c.RetryAfter, c.TransferTimeout, c.IdempotentMethods)
}

// Dispatcher is the front door of `swd --role dispatcher` (policies rr, ct
// and cq): it forwards each arriving request to a node over gRPC, choosing
// the node with a policy.Picker on exact outstanding counts, which it
// updates at every dispatch and completion.
//
// When the current policy has a policy.Holder (cq, see HoldWith), arrivals
// wait instead in one bounded FIFO (HoldLimit, HoldTimeout) and its head is
// sent the moment a node has a free slot (hold.go).
//
// Concurrency: safe for concurrent use; picks, placements and count
// updates happen under one mutex so every decision sees exact counts.
type Dispatcher struct {
	cfg      DispatcherConfig
	fwd      *transfer.Client
	backends func() []Backend
	picker   func() policy.Picker
	holder   func() policy.Holder
	m        *metrics.Metrics
	log      *slog.Logger
	retry    string
	ids      *requestIDs

	mu          sync.Mutex
	seq         uint64
	outstanding map[string]int
	fifo        list.List // of *heldEntry, oldest first
	polling     bool      // a recheck loop runs (hold.go)
	onDispatch  func(DispatchDecision)
	onTransfer  func(peer string, err error)
}

// NewDispatcher returns a dispatcher. backends lists the nodes in ring
// order; picker returns the current dispatch policy.
func NewDispatcher(cfg DispatcherConfig, fwd *transfer.Client, backends func() []Backend, picker func() policy.Picker, m *metrics.Metrics) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m == nil {
		m = metrics.New(metrics.Live{})
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		cfg: cfg, fwd: fwd, backends: backends, picker: picker, m: m, log: log,
		retry:       retryAfterHeader(cfg.RetryAfter),
		ids:         newRequestIDs(cfg.NodeName),
		outstanding: map[string]int{},
	}, nil
}

// OnTransfer registers a callback told of every forward's result (nil
// error on success), for peer-health tracking. Call before serving.
func (d *Dispatcher) OnTransfer(f func(peer string, err error)) { d.onTransfer = f }

// OnDispatch registers a callback run (under the dispatcher's lock) for
// every decision. Call before serving.
func (d *Dispatcher) OnDispatch(f func(DispatchDecision)) { d.onDispatch = f }

// Outstanding returns the exact outstanding count per node.
func (d *Dispatcher) Outstanding() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.outstanding))
	for k, v := range d.outstanding {
		out[k] = v
	}
	return out
}

// ServeHTTP dispatches a client request.
func (d *Dispatcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	fail := func(err error, outcome metrics.Outcome) {
		d.m.ObserveRequest(outcome, time.Since(start))
		if errors.Is(err, swderr.ErrClientGone) || r.Context().Err() != nil {
			return
		}
		d.m.Reject(reason(err))
		WriteError(w, err, d.retry)
	}
	if r.Method == http.MethodConnect || isUpgrade(r) {
		d.m.Reject(metrics.ReasonConnect)
		d.m.ObserveRequest(metrics.OutcomeRejected, time.Since(start))
		http.Error(w, "swd dispatcher: CONNECT and upgrades are not supported", http.StatusMethodNotAllowed)
		return
	}
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		w.Header().Set("Connection", "close") // see Handler.ServeHTTP and FramingGuard
	}
	var body []byte
	if r.ContentLength > d.cfg.MaxTransferBody {
		fail(fmt.Errorf("%w: a dispatcher forwards bodies up to %d bytes", swderr.ErrBodyTooLarge, d.cfg.MaxTransferBody), metrics.OutcomeRejected)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxTransferBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				fail(fmt.Errorf("%w: a dispatcher forwards bodies up to %d bytes", swderr.ErrBodyTooLarge, d.cfg.MaxTransferBody), metrics.OutcomeRejected)
			} else {
				fail(fmt.Errorf("%w: %w", swderr.ErrClientGone, err), metrics.OutcomeClientGone)
			}
			return
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	id := d.ids.of(r)
	msg := transfer.ToMessage(transfer.Outbound{
		ID: id, Request: r, Body: body, Arrival: start, From: d.cfg.NodeName, Dispatched: true,
	})
	// A node that refuses (queue full, draining, unreachable) certainly did
	// not take the request: try the next choice, each node at most once.
	tried := map[string]bool{}
	retried := false
	var lastErr error = swderr.ErrNoBackend
	deadline := start.Add(d.cfg.HoldTimeout)
	for {
		b, err := d.choose(r.Context(), tried, deadline, lastErr)
		if err != nil {
			switch {
			case errors.Is(err, swderr.ErrClientGone):
				fail(err, metrics.OutcomeClientGone)
			case errors.Is(err, swderr.ErrQueueTimeout):
				fail(err, metrics.OutcomeTimedOut)
			default:
				fail(err, metrics.OutcomeRejected)
			}
			return
		}
		sent := time.Now()
		tctx, cancel := context.WithTimeout(r.Context(), d.cfg.TransferTimeout)
		// The node's slot is freed the moment its answer is whole (its
		// app has finished), not once the client has taken the answer:
		// under cq the next held request goes there at once.
		released := false
		res, err := d.fwd.ForwardThen(tctx, b.GRPCAddr, msg, w, func() {
			released = true
			d.release(b.Name)
		})
		cancel()
		if !released {
			d.release(b.Name)
		}
		if d.onTransfer != nil {
			d.onTransfer(b.Name, transferHealth(res, err))
		}
		o := classifyForward(res, err, r.Context().Err() != nil, !retried && slices.Contains(d.cfg.IdempotentMethods, r.Method))
		d.m.TransferOut(b.Name, o.transfer, time.Since(sent))
		switch o.kind {
		case forwardAnswered:
			d.m.ObserveRequest(metrics.OutcomeRemote, time.Since(start))
		case forwardClientGone:
			fail(fmt.Errorf("%w: %w", swderr.ErrClientGone, err), metrics.OutcomeClientGone)
		case forwardAbort:
			d.log.Warn("dispatched answer cut off", "id", id, "node", b.Name, "err", err)
			panic(http.ErrAbortHandler)
		case forwardRefused:
			tried[b.Name] = true
			lastErr = fmt.Errorf("node %s: %w", b.Name, err)
			continue
		case forwardNotRun:
			fail(fmt.Errorf("node %s: %w", b.Name, err), metrics.OutcomeTimedOut)
		case forwardRetry:
			d.log.Info("dispatch failed; retrying an idempotent request on another node", "id", id, "node", b.Name, "err", err)
			retried = true
			tried[b.Name] = true
			lastErr = fmt.Errorf("node %s: %w", b.Name, err)
			continue
		default:
			d.log.Warn("dispatch failed", "id", id, "node", b.Name, "err", err)
			fail(fmt.Errorf("node %s: %w", b.Name, err), metrics.OutcomeFailed)
		}
		return
	}
}

// choose returns the node the request goes to next, counted as
// outstanding there: through the FIFO when the policy holds, else at once
// through the Picker. exclude lists the nodes already tried; lastErr is
// what to answer when no other node is left.
func (d *Dispatcher) choose(ctx context.Context, exclude map[string]bool, deadline time.Time, lastErr error) (Backend, error) {
	if d.holding() {
		b, picked, err := d.hold(ctx, exclude, deadline)
		switch {
		case errors.Is(err, swderr.ErrNoBackend):
			return Backend{}, lastErr
		case err != nil:
			return Backend{}, err
		case picked:
			return b, nil
		}
		// Holding ended while the request waited (the policy changed):
		// it goes through the Picker like any arrival.
	}
	b, ok := d.pick(exclude)
	if !ok {
		return Backend{}, lastErr
	}
	return b, nil
}

// pick chooses a node not in exclude and counts the request as
// outstanding there.
func (d *Dispatcher) pick(exclude map[string]bool) (Backend, bool) {
	bs := d.backends()
	if len(exclude) > 0 {
		kept := bs[:0:0]
		for _, b := range bs {
			if !exclude[b.Name] {
				kept = append(kept, b)
			}
		}
		bs = kept
	}
	if len(bs) == 0 {
		return Backend{}, false
	}
	pk := d.picker()
	d.mu.Lock()
	defer d.mu.Unlock()
	counts := make([]int, len(bs))
	for i, b := range bs {
		counts[i] = d.outstanding[b.Name]
	}
	i := pk.Pick(policy.DispatchView{Outstanding: counts, Seq: d.seq})
	d.seq++
	if i < 0 || i >= len(bs) {
		return Backend{}, false
	}
	if d.onDispatch != nil {
		names := make([]string, len(bs))
		for j, b := range bs {
			names[j] = b.Name
		}
		d.onDispatch(DispatchDecision{Backends: names, Outstanding: counts, Chosen: i})
	}
	d.outstanding[bs[i].Name]++
	return bs[i], true
}

// release ends a request's count on node name (its answer came back or
// the forward failed) and, the slot being free, places held heads.
func (d *Dispatcher) release(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.outstanding[name]--; d.outstanding[name] <= 0 {
		delete(d.outstanding, name)
	}
	d.placeLocked()
}
