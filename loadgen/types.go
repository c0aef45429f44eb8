package loadgen

import (
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/workload"
)

// The load generator's public API speaks of workloads, arrivals and
// capacity bounds whose definitions live in internal packages shared with
// the simulator (one definition, so a seed gives both the same requests).
// These aliases make them part of loadgen's API, so code outside this module
// can name every type a loadgen function takes or returns.
type (
	// Workload is a workload: request sizes and the arrival process.
	Workload = workload.Spec
	// Arrival is one scheduled request of a Schedule.
	Arrival = workload.Arrival
	// CapacityBound says whether a capacity was measured inside the swept
	// rates or lies beyond them.
	CapacityBound = stats.Bound
)

// LookupWorkload returns the preset workload of that name (standard,
// dispersed, burst).
func LookupWorkload(name string) (Workload, error) { return workload.Lookup(name) }
