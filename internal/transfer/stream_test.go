package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// startStreamServer is startServer with cfg changed by mutate.
func startStreamServer(t *testing.T, mutate func(*transfer.ServerConfig), backend transfer.Backend) string {
	t.Helper()
	addr, _ := startServerWith(t, mutate, backend, members{"node-a": true})
	return addr
}

// takingBackend reads the announced body exactly (io.ReadFull of
// ContentLength, as the proxy's receive does), then answers with the
// body's sha256; a read error is returned with nothing written. taken
// counts the requests it answered.
func takingBackend(taken *atomic.Int32) backendFunc {
	return func(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
		if !in.Streamed {
			return errors.New("not streamed")
		}
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return err
		}
		taken.Add(1)
		sum := sha256.Sum256(body)
		_, _ = io.WriteString(w, hex.EncodeToString(sum[:]))
		return nil
	}
}

func randomBody(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(n)}).Read(b)
	return b
}

// TestForwardStreamRoundTrip: bodies of any size, most larger than one
// gRPC message, arrive whole and exact.
func TestForwardStreamRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		maxMsg int // the client's MaxMessageSize; 0: the default
	}{
		// Several MiB, not a multiple of the chunk size, above the 4 MiB
		// message limit.
		{"multi-MiB", 9<<20 + 17, 0},
		// Exactly one chunk.
		{"one chunk", transfer.StreamChunkSize, 0},
		// A single byte.
		{"one byte", 1, 0},
		// No body at all: the head alone.
		{"empty", 0, 0},
		// The smallest message size allowed: chunks shrink to fit.
		{"64 KiB messages", 1<<20 + 5, 64 << 10},
	}
	var taken atomic.Int32
	addr := startStreamServer(t, nil, takingBackend(&taken))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := transfer.DefaultClientConfig()
			if tc.maxMsg > 0 {
				cfg.MaxMessageSize = tc.maxMsg
			}
			c, err := transfer.NewClient(cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			body := randomBody(tc.size)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rec := newRecorder()
			res, err := c.ForwardStream(ctx, addr, outbound(http.MethodPost, "/up?x=1", nil), bytes.NewReader(body), int64(len(body)), rec)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, res.Status)
			assert.Equal(t, "node-b", res.ServedBy)
			sum := sha256.Sum256(body)
			assert.Equal(t, hex.EncodeToString(sum[:]), rec.Body.String(), "the backend got the exact bytes")
		})
	}
	assert.Equal(t, int32(len(tests)), taken.Load())
}

// rawStream opens a ForwardStream call without the Client, to send what
// an honest client never does.
func rawStream(t *testing.T, ctx context.Context, addr string) swdv1.Transfer_ForwardStreamClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	st, err := swdv1.NewTransferClient(cc).ForwardStream(ctx)
	require.NoError(t, err)
	return st
}

// TestForwardStreamSizeMismatch: a body shorter or longer than announced
// fails the call with InvalidArgument, and the backend never takes it.
func TestForwardStreamSizeMismatch(t *testing.T) {
	tests := []struct {
		name   string
		size   int64
		chunks [][]byte
	}{
		// Fewer bytes than announced, then the end.
		{"short", 1000, [][]byte{make([]byte, 500)}},
		// More bytes than announced in one message.
		{"long in one chunk", 500, [][]byte{make([]byte, 1000)}},
		// Exactly the announced bytes, then one more message: found even
		// by a reader that stops at the announced size.
		{"long in a later chunk", 500, [][]byte{make([]byte, 500), {1}}},
		// A second head after the body started.
		{"second head", 1000, [][]byte{make([]byte, 10), nil}},
	}
	var taken atomic.Int32
	addr := startStreamServer(t, nil, takingBackend(&taken))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st := rawStream(t, ctx, addr)
			require.NoError(t, st.Send(&swdv1.ForwardChunk{Head: outbound(http.MethodPost, "/", nil), BodySize: tc.size}))
			for _, ch := range tc.chunks {
				m := &swdv1.ForwardChunk{Body: ch}
				if ch == nil {
					m = &swdv1.ForwardChunk{Head: outbound(http.MethodPost, "/", nil)}
				}
				if st.Send(m) != nil {
					break // the server ended the call
				}
			}
			_ = st.CloseSend()
			_, err := st.Recv()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
	assert.Zero(t, taken.Load(), "no mismatched body was taken")
}

// TestForwardStreamRefused: refusals, on the head before any body byte is
// read or by the backend's budget, reach the sender as ErrRefused (the
// request was not taken, the sender keeps it); a peer without the RPC
// counts as one too.
func TestForwardStreamRefused(t *testing.T) {
	big := randomBody(3 << 20)
	tests := []struct {
		name    string
		msg     func() *swdv1.ForwardRequest
		backend func(read *atomic.Int64) backendFunc
		code    codes.Code
	}{
		// Too many hops: refused on the head.
		{"hop limit", func() *swdv1.ForwardRequest {
			m := outbound(http.MethodPost, "/", nil)
			m.Hops = 5
			return m
		}, nil, codes.FailedPrecondition},
		// Not a member: refused on the head.
		{"not a member", func() *swdv1.ForwardRequest {
			m := outbound(http.MethodPost, "/", nil)
			m.FromNode = "stranger"
			return m
		}, nil, codes.FailedPrecondition},
		// The backend's body budget is exhausted after part of the body.
		{"budget exhausted", func() *swdv1.ForwardRequest { return outbound(http.MethodPost, "/", nil) },
			func(read *atomic.Int64) backendFunc {
				return func(_ http.ResponseWriter, r *http.Request, _ transfer.Inbound) error {
					n, _ := io.CopyN(io.Discard, r.Body, 1<<20)
					read.Add(n)
					return swderr.ErrBufferFull
				}
			}, codes.ResourceExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var read atomic.Int64
			var called atomic.Bool
			backend := backendFunc(func(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
				called.Store(true)
				n, _ := io.Copy(io.Discard, r.Body)
				read.Add(n)
				w.WriteHeader(http.StatusOK)
				return nil
			})
			if tc.backend != nil {
				backend = tc.backend(&read)
			}
			addr := startStreamServer(t, nil, backend)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := newClient(t).ForwardStream(ctx, addr, tc.msg(), bytes.NewReader(big), int64(len(big)), newRecorder())
			require.Error(t, err)
			assert.True(t, errors.Is(err, swderr.ErrRefused), "%v", err)
			st, _ := status.FromError(err)
			assert.Equal(t, tc.code, st.Code(), "%v", err)
			assert.False(t, res.HeadWritten)
			if tc.backend == nil {
				assert.False(t, called.Load(), "refused before the backend")
				assert.Zero(t, read.Load(), "no body byte read")
			}
		})
	}
	// A peer of the previous version has no ForwardStream: nothing ran.
	gs := grpc.NewServer()
	swdv1.RegisterTransferServer(gs, rawServer(func(*swdv1.ForwardRequest, swdv1.Transfer_ForwardServer) error { return nil }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	_, err = newClient(t).ForwardStream(context.Background(), ln.Addr().String(), outbound(http.MethodPost, "/", nil), bytes.NewReader(big), int64(len(big)), newRecorder())
	require.Error(t, err)
	assert.True(t, errors.Is(err, swderr.ErrRefused), "an older peer: %v", err)
}

// TestForwardStreamBodyIdle: a sender that stops sending its body fails
// with DEADLINE_EXCEEDED after the idle timeout, not taken.
func TestForwardStreamBodyIdle(t *testing.T) {
	var taken atomic.Int32
	var readErr atomic.Value
	backend := takingBackend(&taken)
	addr := startStreamServer(t, func(c *transfer.ServerConfig) { c.BodyIdleTimeout = 200 * time.Millisecond },
		backendFunc(func(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
			err := backend(w, r, in)
			if err != nil {
				readErr.Store(err)
			}
			return err
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := rawStream(t, ctx, addr)
	require.NoError(t, st.Send(&swdv1.ForwardChunk{Head: outbound(http.MethodPost, "/", nil), BodySize: 1000}))
	require.NoError(t, st.Send(&swdv1.ForwardChunk{Body: make([]byte, 100)}))
	// No more, and no end: the server gives up on its own.
	_, err := st.Recv()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.ErrorIs(t, readErr.Load().(error), swderr.ErrBodyTimeout)
	assert.Zero(t, taken.Load())
}
