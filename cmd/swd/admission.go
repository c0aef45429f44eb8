package main

import (
	"github.com/spf13/pflag"

	"github.com/swd-project/swd/internal/node"
)

// addAdmissionFlags adds the flags of overload control that protects
// sessions (internal/admission, docs/admission.md).
func addAdmissionFlags(fs *pflag.FlagSet, c *node.Config) {
	a := &c.Admission
	fs.StringVar((*string)(&a.Mode), "admission", string(a.Mode), `overload control: "none" (FIFO under m), "page" (per-route limits hill-climbed on each route's throughput), "sqs" (page, and new sessions admitted at most one per adaptive interval); not with --cohort`)
	fs.DurationVar(&a.Window, "admission-window", a.Window, "history window: a route's throughput is measured over one window at each limit; its limit moves by at most 1 per window")
	fs.IntVar(&a.InitialLimit, "admission-initial-limit", a.InitialLimit, "every route's limit before it learnt one (capped by m)")
	fs.StringVar(&a.SessionCookie, "session-cookie", a.SessionCookie, "cookie naming a session (sqs): a request without it, or with a value unseen for --session-idle, starts a new session")
	fs.DurationVar(&a.SessionIdle, "session-idle", a.SessionIdle, "a session not seen for this long is new again (sqs)")
	fs.IntVar(&a.MaxSessions, "max-sessions", a.MaxSessions, "most sessions remembered (sqs); beyond it the least recently seen is forgotten")
	fs.IntVar(&a.SessionQueue, "session-queue", a.SessionQueue, "most new sessions waiting for admission (sqs); beyond it 503 at once")
	fs.DurationVar(&a.SessionMaxWait, "session-max-wait", a.SessionMaxWait, "longest a new session waits for admission (sqs): one predicted to wait longer is refused at once (503, Retry-After)")
	fs.DurationVar(&a.Interval, "session-interval", a.Interval, "initial session interval (sqs): at most one new session admitted per interval")
	fs.DurationVar(&a.MinInterval, "session-interval-min", a.MinInterval, "shortest session interval (sqs)")
	fs.DurationVar(&a.MaxInterval, "session-interval-max", a.MaxInterval, "longest session interval (sqs)")
	fs.DurationVar(&a.Step, "session-interval-step", a.Step, "what the session interval grows by (page queues above --session-threshold) or shrinks by (below) every 100 ms (sqs)")
	fs.Float64Var(&a.Threshold, "session-threshold", a.Threshold, "page-queue length (requests waiting at this node, mean of recent samples) above which the session interval grows and below which it shrinks (sqs)")
}
