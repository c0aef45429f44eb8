package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/policy"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// GRPCSwitcher switches a cluster's policy through the Control service:
// SetPolicy with cluster=true on one node, which applies it to every
// member. For a dispatch policy (rr, ct) it also sets the dispatcher's
// policy directly when DispatcherControl is given and the cluster-wide
// call did not reach it.
//
// Safe for concurrent use; it dials per call.
type GRPCSwitcher struct {
	// Control is the gRPC address of any node.
	Control string
	// DispatcherControl is the dispatcher's gRPC address (optional).
	DispatcherControl string
	// Token, if set, is sent as "authorization: Bearer <token>".
	Token string
	// Timeout bounds each call (default 10s).
	Timeout time.Duration
}

// SetPolicy implements PolicySwitcher.
func (s *GRPCSwitcher) SetPolicy(ctx context.Context, name string) error {
	if s.Control == "" {
		return errors.New("no control address: give a node's gRPC address (--control)")
	}
	p, err := policy.Lookup(name)
	if err != nil {
		return err
	}
	resp, err := s.call(ctx, s.Control, &swdv1.SetPolicyRequest{Name: name, Cluster: true})
	if err != nil {
		return fmt.Errorf("set policy on %s: %w", s.Control, err)
	}
	var bad []string
	reached := map[string]bool{}
	for _, r := range resp.GetResults() {
		if !r.GetOk() {
			bad = append(bad, fmt.Sprintf("%s (%s): %s", r.GetNode(), r.GetAddr(), r.GetError()))
			continue
		}
		reached[r.GetAddr()] = true
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d nodes refused policy %s: %s", len(bad), len(resp.GetResults()), name, strings.Join(bad, "; "))
	}
	if p.Kind == policy.KindDispatch && s.DispatcherControl != "" && !reached[s.DispatcherControl] {
		resp, err := s.call(ctx, s.DispatcherControl, &swdv1.SetPolicyRequest{Name: name})
		if err != nil {
			return fmt.Errorf("set policy on the dispatcher %s: %w", s.DispatcherControl, err)
		}
		for _, r := range resp.GetResults() {
			if !r.GetOk() {
				return fmt.Errorf("the dispatcher refused policy %s: %s", name, r.GetError())
			}
		}
	}
	return nil
}

func (s *GRPCSwitcher) call(ctx context.Context, addr string, req *swdv1.SetPolicyRequest) (*swdv1.SetPolicyResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = auth.OutgoingContext(ctx, s.Token)
	return swdv1.NewControlClient(conn).SetPolicy(ctx, req)
}
