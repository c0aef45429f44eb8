package node

import (
	"embed"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/swd-project/swd/internal/cluster"
)

// The status page: ui/index.html, its script ui/ui.js and the charting
// library it draws with (ui/vendor: Chart.js, MIT, from Debian's
// libjs-chart.js 3.9.1), all embedded; /ui/state is the JSON it polls.
//
//go:embed ui/index.html ui/ui.js ui/vendor/chart.js/chart.min.js ui/vendor/chart.js/LICENSE
var uiFS embed.FS

// uiAssets are the files served under /ui/ besides the page, by name.
var uiAssets = map[string]string{
	"ui.js":        "ui/ui.js",
	"chart.min.js": "ui/vendor/chart.js/chart.min.js",
}

// uiCSP lets the page load only its own origin's scripts and data (no
// inline script); inline styles are allowed for the page's style block.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

// uiState is what the status page polls from /ui/state.
type uiState struct {
	Node   string `json:"node"`
	Role   string `json:"role"`
	Policy string `json:"policy"`
	Epoch  int64  `json:"epoch"`
	// EpochTime is when the policy epoch was stamped (epochs are
	// wall-clock milliseconds), empty for the startup epoch 0.
	EpochTime string            `json:"epoch_time"`
	Draining  bool              `json:"draining"`
	Nodes     []uiNode          `json:"nodes"`
	Edges     []uiEdge          `json:"edges"`
	Counters  map[string]uint64 `json:"counters"`
	Ejected   []string          `json:"ejected"`
	Time      time.Time         `json:"time"`
	// TimeMs is Time in Unix milliseconds, the clock the samples use.
	TimeMs int64 `json:"time_ms"`
}

// uiNode is one member as the page draws it.
type uiNode struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	RingID int    `json:"ring_id"`
	Self   bool   `json:"self"`
	// Load, Known and AgeMs are this node's gossiped view of the member.
	Load  int     `json:"load"`
	Known bool    `json:"known"`
	AgeMs float64 `json:"age_ms"`
	// Policy and Epoch as the member last gossiped them; EpochTime as for
	// uiState.
	Policy    string `json:"policy"`
	Epoch     int64  `json:"epoch"`
	EpochTime string `json:"epoch_time"`
	// What the member's Control.Status said (Error when it did not).
	Queue       int64        `json:"queue"`
	InFlight    int64        `json:"in_flight"`
	Concurrency int32        `json:"concurrency"`
	Version     string       `json:"version"`
	Error       string       `json:"error,omitempty"`
	Samples     []uiSample   `json:"samples"`
	Handoff     []uiHandoff  `json:"handoff"`
	Routes      []uiRouteRow `json:"routes"`
	// WorkMs is the member's gossiped predicted work (0 unless it runs
	// --load-index work).
	WorkMs float64 `json:"work_ms"`
}

// uiSample is one second of a member's flows.
type uiSample struct {
	T        int64   `json:"t"` // end of the interval, Unix milliseconds
	Queue    int32   `json:"queue"`
	InFlight int32   `json:"in_flight"`
	Requests float64 `json:"requests"` // client requests answered per second
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	App      float64 `json:"app"`
	Out      float64 `json:"out"` // transfers sent per second (ok)
	In       float64 `json:"in"`  // transfers received per second (ok)
}

// uiEdge is the current flow from one member to another: the sender's
// latest sample.
type uiEdge struct {
	From            string  `json:"from"`
	To              string  `json:"to"`
	PerSecond       float64 `json:"per_second"`
	FailedPerSecond float64 `json:"failed_per_second"`
	BytesPerSecond  float64 `json:"bytes_per_second"`
	Total           uint64  `json:"total"`
}

// uiHandoff is a member's measured hand-off cost of one body size class.
type uiHandoff struct {
	MaxBytes int64   `json:"max_bytes"`
	Ms       float64 `json:"ms"`
	Samples  uint64  `json:"samples"`
}

// uiRouteRow is one route's learnt state on a member (StatusResponse's
// RouteStat), when a per-route feature keeps it.
type uiRouteRow struct {
	Name       string  `json:"name"`
	Limit      int32   `json:"limit"`
	InFlight   int32   `json:"in_flight"`
	Waiting    int32   `json:"waiting"`
	CostMs     float64 `json:"cost_ms"`
	Samples    uint64  `json:"samples"`
	Throughput float64 `json:"throughput"`
}

func registerUI(mux *http.ServeMux, n *Node) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		b, _ := uiFS.ReadFile("ui/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", uiCSP)
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /ui/{asset}", func(w http.ResponseWriter, r *http.Request) {
		name, ok := uiAssets[r.PathValue("asset")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, _ := uiFS.ReadFile(name)
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent) // browsers ask for it; there is none
	})
	ui := newUICluster()
	mux.HandleFunc("GET /ui/state", func(w http.ResponseWriter, r *http.Request) {
		var since int64 // Unix milliseconds
		if s := r.URL.Query().Get("since"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				http.Error(w, "since: want Unix milliseconds", http.StatusBadRequest)
				return
			}
			since = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(n.uiState(ui, since))
	})
}

// epochTime renders a policy epoch (wall-clock milliseconds) as a time,
// "" for the startup epoch.
func epochTime(epoch int64) string {
	if epoch <= 0 {
		return ""
	}
	return time.UnixMilli(epoch).UTC().Format(time.RFC3339)
}

func (n *Node) uiState(ui *uiCluster, sinceMs int64) uiState {
	now := time.Now()
	ps := n.Policy()
	st := uiState{
		Node: n.cfg.NodeName, Role: n.cfg.Role, Policy: ps.Name, Epoch: ps.Epoch, EpochTime: epochTime(ps.Epoch),
		Draining: n.draining.Load(), Ejected: n.hlth.ejected(), Time: now, TimeMs: now.UnixMilli(),
		Nodes: []uiNode{}, Edges: []uiEdge{},
	}
	if st.Ejected == nil {
		st.Ejected = []string{}
	}
	st.Counters = counters(n.m.Snapshot(), false)
	if n.cl == nil {
		return st
	}
	ui.refresh(n, now)
	members := ui.snapshot(sinceMs * int64(time.Millisecond))
	for _, p := range n.cl.Peers() {
		nd := uiNode{
			Name: p.Name, Role: p.Role, RingID: p.RingID, Self: p.Name == n.cfg.NodeName, Load: p.Load, Known: p.Known,
			AgeMs: float64(p.Age) / 1e6, Policy: p.Policy.Name, Epoch: p.Policy.Epoch, EpochTime: epochTime(p.Policy.Epoch),
			Samples: []uiSample{}, Handoff: []uiHandoff{}, Routes: []uiRouteRow{}, WorkMs: float64(p.Work) / 1e6,
		}
		if nd.Role == "" {
			nd.Role = cluster.RoleNode
		}
		m, ok := members[p.Name]
		if ok {
			nd.Error = m.err
			if s := m.status; s != nil {
				nd.Queue, nd.InFlight, nd.Concurrency, nd.Version = s.GetQueueLength(), s.GetInFlight(), s.GetConcurrency(), s.GetVersion()
				if ps := s.GetPolicy(); ps.GetName() != "" {
					// The member's own word beats gossip (a dispatcher gossips no policy).
					nd.Policy, nd.Epoch, nd.EpochTime = ps.GetName(), ps.GetEpoch(), epochTime(ps.GetEpoch())
				}
				for _, c := range s.GetHandoffCosts() {
					nd.Handoff = append(nd.Handoff, uiHandoff{MaxBytes: c.GetMaxBytes(), Ms: c.GetSeconds() * 1e3, Samples: c.GetSamples()})
				}
				for _, r := range s.GetRoutes() {
					nd.Routes = append(nd.Routes, uiRouteRow{
						Name: r.GetName(), Limit: r.GetLimit(), InFlight: r.GetInFlight(), Waiting: r.GetWaiting(),
						CostMs: r.GetCostSeconds() * 1e3, Samples: r.GetSamples(), Throughput: r.GetThroughput(),
					})
				}
			}
			for _, s := range m.samples {
				u := uiSample{
					T: s.GetUnixNano() / int64(time.Millisecond), Queue: s.GetQueueLength(), InFlight: s.GetInFlight(),
					Requests: s.GetRequestsPerSecond(), P50Ms: s.GetP50Seconds() * 1e3, P99Ms: s.GetP99Seconds() * 1e3, App: s.GetAppPerSecond(),
				}
				for _, e := range s.GetEdges() {
					if e.GetDirection() == "out" {
						u.Out += e.GetPerSecond()
					} else {
						u.In += e.GetPerSecond()
					}
				}
				nd.Samples = append(nd.Samples, u)
			}
		}
		st.Nodes = append(st.Nodes, nd)
	}
	// The current flows: every member's latest sample, as its sender saw
	// them. The snapshot above may hold only new samples; the latest of
	// all is asked for separately.
	for _, name := range sortedNames(members) {
		latest := ui.latest(name)
		if latest == nil {
			continue
		}
		for _, e := range latest.GetEdges() {
			if e.GetDirection() != "out" {
				continue
			}
			st.Edges = append(st.Edges, uiEdge{
				From: name, To: e.GetPeer(), PerSecond: e.GetPerSecond(), FailedPerSecond: e.GetFailedPerSecond(),
				BytesPerSecond: e.GetBytesPerSecond(), Total: e.GetTotal(),
			})
		}
	}
	return st
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
