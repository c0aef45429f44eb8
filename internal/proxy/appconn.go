package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// When a client leaves while the app works on its request, swd does not
// close the app connection (an app that ignores disconnects, as most do,
// would go on working while swd gave its slot to the next request): it
// half-closes it (shuts down its writing side). An app that watches for
// disconnects sees end-of-file and stops (Go's net/http cancels the
// request's context); one that does not finishes its answer. Either way
// swd reads what comes until the answer has ended or the app closed the
// connection, and only then frees the slot (see serveLocal). A
// half-closed connection is never used again: writing to it fails before
// any byte is sent, which net/http's Transport retries on another
// connection.

// appConn is a connection to the app that can be half-closed for good.
type appConn struct {
	net.Conn
	poisoned atomic.Bool
}

var errHalfClosed = errors.New("app connection half-closed after its client left")

func (c *appConn) Write(b []byte) (int, error) {
	if c.poisoned.Load() {
		return 0, errHalfClosed
	}
	return c.Conn.Write(b)
}

// halfClose shuts the connection's writing side and marks it unusable.
func (c *appConn) halfClose() {
	if c.poisoned.Swap(true) {
		return
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	_ = c.Conn.Close() // no half-close here: close
}

// appDialer wraps every app connection in an appConn.
func appDialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &appConn{Conn: c}, nil
	}
}

// appRequest follows one request to the app: which connection it got and
// whether it was written, so that a client leaving can half-close it.
type appRequest struct {
	mu     sync.Mutex
	conn   *appConn
	wrote  bool
	gone   bool
	cancel context.CancelFunc
}

// trace returns ctx with the hooks that follow the request.
func (a *appRequest) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			c := i.Conn
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			ac, _ := c.(*appConn)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.conn, a.wrote = ac, false
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.wrote = true
			if a.gone && a.conn != nil {
				a.conn.halfClose()
			}
		},
	})
}

// clientGone is called when the client left: a request the app has not
// been sent yet is cancelled (the app never sees it); one it has is
// half-closed, and its answer awaited.
func (a *appRequest) clientGone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gone = true
	if !a.wrote || a.conn == nil {
		a.cancel()
		return
	}
	a.conn.halfClose()
}
