package node

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// The /ui page shows the whole cluster from any node: while someone has
// the page open, the node asks every member (itself included, in process)
// for its Control.Status with the flow samples it has not fetched yet, at
// most once per uiRefresh, and keeps each member's history. Nobody
// watching, nothing is fetched: the cost is one Status call per member
// and second, only while the page polls.

const (
	// uiRefresh is the least time between two fetches of the members'
	// flows.
	uiRefresh = 900 * time.Millisecond
	// uiCallTimeout bounds one member's Status call.
	uiCallTimeout = time.Second
	// uiHistory is how many samples the page keeps per member, as each
	// node does itself (flow.DefaultConfig().History).
	uiHistory = 300
)

// uiMember is what the page knows of one member.
type uiMember struct {
	status  *swdv1.StatusResponse // the last answer (flows stripped)
	samples []*swdv1.FlowSample   // oldest first, at most uiHistory
	err     string                // the last call's error, "" when it answered
}

// uiCluster collects the members' flows for the page.
type uiCluster struct {
	mu      sync.Mutex
	last    time.Time
	members map[string]*uiMember
}

func newUICluster() *uiCluster { return &uiCluster{members: map[string]*uiMember{}} }

// statusOf asks member p for its status and the flow samples after after.
func (n *Node) statusOf(ctx context.Context, p cluster.Peer, after int64) (*swdv1.StatusResponse, error) {
	req := &swdv1.StatusRequest{Flows: true, FlowsAfterUnixNano: after}
	if p.Name == n.cfg.NodeName {
		return n.ctl.Status(ctx, req)
	}
	cc, err := n.tc.Conn(p.GRPCAddr)
	if err != nil {
		return nil, err
	}
	return swdv1.NewControlClient(cc).Status(ctx, req)
}

// refresh fetches every member's new flow samples, unless that was done
// less than uiRefresh ago, and forgets members that left. It returns the
// members' names, sorted.
func (u *uiCluster) refresh(n *Node, now time.Time) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var peers []cluster.Peer
	if n.cl != nil {
		peers = n.cl.Peers()
	}
	names := make([]string, 0, len(peers))
	alive := map[string]bool{}
	for _, p := range peers {
		names = append(names, p.Name)
		alive[p.Name] = true
	}
	sort.Strings(names)
	for name := range u.members {
		if !alive[name] {
			delete(u.members, name)
		}
	}
	if now.Sub(u.last) < uiRefresh || n.ctl == nil {
		return names
	}
	u.last = now
	type answer struct {
		name string
		resp *swdv1.StatusResponse
		err  error
	}
	answers := make(chan answer, len(peers))
	for _, p := range peers {
		m := u.members[p.Name]
		if m == nil {
			m = &uiMember{}
			u.members[p.Name] = m
		}
		var after int64
		if k := len(m.samples); k > 0 {
			after = m.samples[k-1].GetUnixNano()
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), uiCallTimeout)
			defer cancel()
			resp, err := n.statusOf(ctx, p, after)
			answers <- answer{p.Name, resp, err}
		}()
	}
	for range peers {
		a := <-answers
		m := u.members[a.name]
		if a.err != nil {
			m.err = a.err.Error()
			continue
		}
		m.err = ""
		for _, s := range a.resp.GetFlows() {
			if k := len(m.samples); k == 0 || s.GetUnixNano() > m.samples[k-1].GetUnixNano() {
				m.samples = append(m.samples, s)
			}
		}
		if over := len(m.samples) - uiHistory; over > 0 {
			m.samples = append([]*swdv1.FlowSample(nil), m.samples[over:]...)
		}
		a.resp.Flows = nil
		m.status = a.resp
	}
	return names
}

// snapshot copies what the page shows of each member: the last status and
// the samples after since (unix nanoseconds).
func (u *uiCluster) snapshot(since int64) map[string]uiMember {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]uiMember, len(u.members))
	for name, m := range u.members {
		c := uiMember{status: m.status, err: m.err}
		for _, s := range m.samples {
			if s.GetUnixNano() > since {
				c.samples = append(c.samples, s)
			}
		}
		out[name] = c
	}
	return out
}

// latest returns member name's newest sample, nil when it has none.
func (u *uiCluster) latest(name string) *swdv1.FlowSample {
	u.mu.Lock()
	defer u.mu.Unlock()
	if m := u.members[name]; m != nil && len(m.samples) > 0 {
		return m.samples[len(m.samples)-1]
	}
	return nil
}
