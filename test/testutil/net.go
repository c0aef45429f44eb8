package testutil

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/dummyapp"
	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// FreeAddrs returns n distinct 127.0.0.1:PORT addresses from
// localcluster.FreePorts: free for TCP and UDP when checked, outside the
// kernel's ephemeral range, and never handed out before in this test binary
// (to a cluster or to another caller).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := localcluster.FreeAddrs(n)
	require.NoError(t, err)
	return addrs
}

// FreeAddr is one address from FreeAddrs.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrs(t, 1)[0]
}

// Plaintext is the dial option of a gRPC client without TLS.
func Plaintext() grpc.DialOption { return grpc.WithTransportCredentials(insecure.NewCredentials()) }

// Dial returns a gRPC client connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Control returns a Control client over plaintext gRPC to addr with the
// extra dial options opts, closed when the test ends.
func Control(t testing.TB, addr string, opts ...grpc.DialOption) swdv1.ControlClient {
	t.Helper()
	return swdv1.NewControlClient(Dial(t, addr, append([]grpc.DialOption{Plaintext()}, opts...)...))
}

// Status asks cl for its node's status, within 5 s.
func Status(t testing.TB, cl swdv1.ControlClient) *swdv1.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := cl.Status(ctx, &swdv1.StatusRequest{})
	require.NoError(t, err)
	return s
}

// AppStats fetches the /stats of the dummyapp at appAddr.
func AppStats(t testing.TB, appAddr string) dummyapp.Stats {
	t.Helper()
	resp, err := http.Get("http://" + appAddr + "/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var s dummyapp.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

// Do sends req with c, then reads the answer's body to the end and closes
// it: the caller reads only the status and the headers.
func Do(c *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}

// Get is Do for a GET of url.
func Get(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return Do(c, req)
}

// Concurrently calls f(0), f(1), ... f(n-1), each in its own goroutine,
// and returns a function that waits until all have returned.
func Concurrently(n int, f func(i int)) (wait func()) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	return wg.Wait
}

// OpenLoop calls f(0), f(1), ... f(n-1), each in its own goroutine, one
// every gap, and returns once all have returned.
func OpenLoop(n int, gap time.Duration, f func(i int)) {
	var wg sync.WaitGroup
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
