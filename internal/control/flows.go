package control

import (
	"time"

	"github.com/swd-project/swd/internal/flow"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// FlowSource is implemented by a Local that keeps flow statistics (the
// daemon, with internal/flow): Control.Status then reports its measured
// hand-off costs, and its flow samples when asked (StatusRequest.flows).
type FlowSource interface {
	// FlowSamples returns the samples whose interval ended after t,
	// oldest first (the zero time: all kept).
	FlowSamples(after time.Time) []flow.Sample
	// HandoffCosts returns the measured hand-off cost per body size
	// class, smallest first.
	HandoffCosts() []flow.Cost
}

// addFlows fills the flow fields of resp from the Local, if it keeps them.
func (s *Service) addFlows(resp *swdv1.StatusResponse, req *swdv1.StatusRequest) {
	fs, ok := s.r.Local.(FlowSource)
	if !ok {
		return
	}
	for _, c := range fs.HandoffCosts() {
		resp.HandoffCosts = append(resp.HandoffCosts, &swdv1.HandoffCost{MaxBytes: c.MaxBytes, Seconds: c.Mean.Seconds(), Samples: c.Samples})
	}
	if !req.GetFlows() {
		return
	}
	var after time.Time
	if ns := req.GetFlowsAfterUnixNano(); ns > 0 {
		after = time.Unix(0, ns)
	}
	for _, smp := range fs.FlowSamples(after) {
		resp.Flows = append(resp.Flows, FlowMessage(smp))
	}
}

// FlowMessage is the wire form of a flow sample.
func FlowMessage(smp flow.Sample) *swdv1.FlowSample {
	m := &swdv1.FlowSample{
		UnixNano: smp.At.UnixNano(), Seconds: smp.Seconds,
		QueueLength: int32(smp.Queue), InFlight: int32(smp.InFlight), Concurrency: int32(smp.Concurrency),
		RequestsPerSecond: smp.Requests, P50Seconds: smp.P50, P99Seconds: smp.P99, AppPerSecond: smp.App,
	}
	for _, e := range smp.Edges {
		m.Edges = append(m.Edges, &swdv1.EdgeRate{
			Peer: e.Peer, Direction: string(e.Direction), PerSecond: e.PerSecond,
			FailedPerSecond: e.FailedPerSecond, BytesPerSecond: e.BytesPerSecond, Total: e.Total,
		})
	}
	return m
}
