// Package loadgen is SWD's load generator: it offers the paper's workloads
// (internal/workload) to a cluster in an open loop on vegeta's attacker,
// sweeps arrival rates and policies, computes the x-th percentile capacity,
// and renders the results as a table shaped like the paper's Tables 2-4, a
// CSV file, JSON and PNG plots.
//
// # Open loop
//
// A run draws its whole arrival schedule up front from a workload.Generator
// (NewSchedule), so a seed gives exactly the arrivals the simulator sees. A
// SchedulePacer makes vegeta's attacker send request k at offset
// Arrivals[k].At; the requests of a burst share one offset and leave back to
// back. vegeta starts another worker whenever every worker is busy, so a
// slow cluster never delays the schedule. Response times are measured from
// each request's scheduled time, not from when a worker got to it, so a
// generator that falls behind cannot hide queueing (no coordinated
// omission): Run rewrites every vegeta.Result's Timestamp to the scheduled
// time and its Latency to end - scheduled, and reports the largest send lag.
//
// Each request carries its size: GET /work?ms=X (dummyapp's endpoint). A
// Targeter spreads requests over the nodes round robin (how the paper's
// clients reach LL and N) or sends them all to one dispatcher (RR, CT).
//
// # Peers
//
// A sweep may also measure other balancers (SweepConfig.Peers): after the
// policies, a PeerStarter (PeerLauncher: internal/peers) starts each in
// front of the cluster's apps, every request of its runs goes to it, and it
// is stopped. Its rows carry its name like a policy's. With
// Report.Reference set, every capacity is also given as a Ratio to the
// reference's.
//
// # Files
//
// Run writes the measured requests of a run (warm-up excluded) to
// OUT/<policy>_<rate>/results.bin in vegeta's gob encoding, so `vegeta
// report` and `vegeta plot` read it. Sweeps write OUT/results.csv (columns
// CSVHeader, rewritten after every run so an interrupted sweep keeps what it
// measured), OUT/report.json and the plots.
//
// # Statistics
//
// requests counts the requests scheduled in the measured window (after the
// warm-up); errors counts those that failed (transport error or a status
// outside 2xx). Mean and percentiles are over the successful ones, in ms;
// percentiles use the simulator's definition (stats.Percentile: linear
// interpolation between closest ranks). A row whose
// error fraction exceeds the sweep's MaxErrorRate is shown as "failed" and
// counts as over every capacity limit.
//
// # Concurrency
//
// Schedules, Rows, Capacities and Reports are values; share them freely once
// built. A SchedulePacer and a Targeter are safe for the concurrent use
// vegeta makes of them (one pacing goroutine, many workers). Run and Sweep
// may be called from several goroutines on different configurations, but a
// Sweep's Progress, PolicySwitcher and PeerStarter are only ever called
// from the goroutine running that Sweep. A LocalCluster's methods and a
// PeerLauncher are safe for concurrent use.
package loadgen
