package node

import (
	"embed"
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

//go:embed ui/index.html
var uiFS embed.FS

// uiState is what the status page polls from /ui/state.
type uiState struct {
	Node      string            `json:"node"`
	Role      string            `json:"role"`
	Policy    string            `json:"policy"`
	Epoch     int64             `json:"epoch"`
	Draining  bool              `json:"draining"`
	Nodes     []uiNode          `json:"nodes"`
	Transfers []uiTransfer      `json:"transfers"`
	Counters  map[string]uint64 `json:"counters"`
	Ejected   []string          `json:"ejected"`
	Time      time.Time         `json:"time"`
	// Routes is what this node learnt per route (work load index).
	Routes []uiRoute `json:"routes"`
}

type uiRoute struct {
	Name    string  `json:"name"`
	CostMs  float64 `json:"cost_ms"`
	Samples uint64  `json:"samples"`
}

type uiNode struct {
	Name   string  `json:"name"`
	RingID int     `json:"ring_id"`
	Load   int     `json:"load"`
	Known  bool    `json:"known"`
	AgeMs  float64 `json:"age_ms"`
	Policy string  `json:"policy"`
	Epoch  int64   `json:"epoch"`
	Self   bool    `json:"self"`
	// WorkMs is the node's gossiped predicted work (0 unless it runs
	// --load-index work).
	WorkMs float64 `json:"work_ms"`
}

type uiTransfer struct {
	Peer      string `json:"peer"`
	Direction string `json:"direction"`
	Outcome   string `json:"outcome"`
	Count     uint64 `json:"count"`
}

func registerUI(mux *http.ServeMux, n *Node) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		b, _ := uiFS.ReadFile("ui/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent) // browsers ask for it; there is none
	})
	mux.HandleFunc("GET /ui/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(n.uiState())
	})
}

func (n *Node) uiState() uiState {
	ps := n.Policy()
	st := uiState{
		Node: n.cfg.NodeName, Role: n.cfg.Role, Policy: ps.Name, Epoch: ps.Epoch,
		Draining: n.draining.Load(), Ejected: n.hlth.ejected(), Time: time.Now(),
		Nodes: []uiNode{}, Transfers: []uiTransfer{}, Routes: []uiRoute{},
	}
	for _, r := range n.routeStats() {
		st.Routes = append(st.Routes, uiRoute{Name: r.Name, CostMs: float64(r.Cost) / 1e6, Samples: r.Samples})
	}
	if st.Ejected == nil {
		st.Ejected = []string{}
	}
	if n.cl != nil {
		for _, p := range n.cl.Peers() {
			if p.RingID < 0 {
				continue
			}
			st.Nodes = append(st.Nodes, uiNode{
				Name: p.Name, RingID: p.RingID, Load: p.Load, Known: p.Known,
				AgeMs: float64(p.Age) / 1e6, Policy: p.Policy.Name, Epoch: p.Policy.Epoch, Self: p.Name == n.cfg.NodeName,
				WorkMs: float64(p.Work) / 1e6,
			})
		}
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].RingID < st.Nodes[j].RingID })
	snap := n.m.Snapshot()
	st.Counters = counters(snap, false)
	for _, t := range snap.Transfers {
		st.Transfers = append(st.Transfers, uiTransfer{Peer: t.Peer, Direction: string(t.Direction), Outcome: string(t.Outcome), Count: t.Count})
	}
	return st
}
