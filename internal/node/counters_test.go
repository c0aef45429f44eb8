package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/swd-project/swd/internal/metrics"
)

// TestCounters: the keys swdctl status prints and /ui lists are built from
// one metrics.Snapshot, and only counters that saw an event appear.
func TestCounters(t *testing.T) {
	m := metrics.New(metrics.Live{})
	m.ObserveRequest(metrics.OutcomeRemote, time.Millisecond)
	m.Reject(metrics.ReasonDraining)
	m.TransferOut("node-1", metrics.TransferOK, time.Millisecond)
	m.TransferIn("node-2", metrics.TransferRefused)
	m.Pulled(metrics.PullMiss)
	tests := []struct {
		name      string
		transfers bool
		want      map[string]uint64
	}{
		// swdctl status: requests, rejections, pulls and transfers.
		{"status", true, map[string]uint64{
			"requests/served_remote":      1,
			"rejections/draining":         1,
			"pulls/miss":                  1,
			"transfers/out/ok/node-1":     1,
			"transfers/in/refused/node-2": 1,
		}},
		// /ui lists transfers in their own table.
		{"ui", false, map[string]uint64{
			"requests/served_remote": 1,
			"rejections/draining":    1,
			"pulls/miss":             1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, counters(m.Snapshot(), tt.transfers))
		})
	}
}
