package transfer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// fakeStream is a responseStream whose context the test ends.
type fakeStream struct {
	ctx  context.Context
	sent []*swdv1.ForwardResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }
func (f *fakeStream) Send(m *swdv1.ForwardResponse) error {
	f.sent = append(f.sent, m)
	return nil
}
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}

type backendFunc func(w http.ResponseWriter, r *http.Request, in Inbound) error

func (f backendFunc) ServeTransferred(w http.ResponseWriter, r *http.Request, in Inbound) error {
	return f(w, r, in)
}

// An answer whose call ended while it was being written (the sender's
// transfer timeout: the app's connection is half-closed and the app may end
// its answer early and cleanly) ends with the context's status, never as a
// complete answer; the same answer with the call still open ends OK.
func TestServeCallEndedMidAnswer(t *testing.T) {
	cases := []struct {
		name  string
		end   func(context.CancelFunc) // what happens to the call while the backend writes
		wantC codes.Code
	}{
		// The call is still open when the backend returns: a complete answer.
		{"call open", func(context.CancelFunc) {}, codes.OK},
		// The sender's deadline or cancellation ended the call mid-answer.
		{"call ended", func(cancel context.CancelFunc) { cancel() }, codes.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultServerConfig()
			cfg.NodeName, cfg.CheckMembership = "node-b", false // serve checks nothing
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := NewServer(cfg, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ Inbound) error {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte("first"))
				tc.end(cancel)
				return nil // the app's answer ended cleanly
			}), nil)
			require.NoError(t, err)
			fs := &fakeStream{ctx: ctx}
			err = srv.serve(fs, httptest.NewRequest(http.MethodGet, "/", nil), Inbound{})
			assert.Equal(t, tc.wantC, status.Code(err), "%v", err)
			require.NotEmpty(t, fs.sent)
			assert.NotNil(t, fs.sent[0].GetHead(), "the head went out first")
		})
	}
}
