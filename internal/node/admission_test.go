package node

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/admission"
	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/cluster"
)

func TestValidateAdmission(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		// The default: no admission control.
		{"none", func(*Config) {}, ""},
		// sqs alone is fine.
		{"sqs", func(c *Config) { c.Admission.Mode = admission.ModeSQS }, ""},
		// The cohort order and per-route limits both want the queue's one
		// scheduler: refused with a message naming both flags.
		{"cohort and page", func(c *Config) {
			c.Admission.Mode = admission.ModePage
			c.Cohort.Enabled = true
			c.Affinity.Source, _ = affinity.ParseSource("header:X-User")
		}, "--admission page|sqs and --cohort"},
		// The same for sqs.
		{"cohort and sqs", func(c *Config) {
			c.Admission.Mode = admission.ModeSQS
			c.Cohort.Enabled = true
			c.Affinity.Source, _ = affinity.ParseSource("header:X-User")
		}, "--admission page|sqs and --cohort"},
		// A dispatcher holds no queue.
		{"dispatcher", func(c *Config) { c.Admission.Mode = admission.ModePage; c.Role = cluster.RoleDispatcher }, "applies to nodes"},
		// A bad mode names the flag.
		{"bad mode", func(c *Config) { c.Admission.Mode = "fifo" }, "--admission"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := named()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
