package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"sync"
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
// connection. The app closes such a connection once it has answered; that
// end of file must not read as an idle connection the server closed
// (net/http retries that error only for idempotent requests, so a POST
// that picked the connection just then would fail with 502), so Read
// reports it as errHalfClosed, which the Transport retries like any
// connection broken before a byte was written.

// appConn is a connection to the app that can be half-closed for good.
type appConn struct {
	net.Conn
	mu sync.Mutex
	// owner is the request that got the connection last; poisonedBy the
	// one whose client left (the connection is unusable from then on).
	owner, poisonedBy *appRequest
}

var errHalfClosed = errors.New("app connection half-closed after its client left")

// Write refuses to write once the connection was half-closed. For the
// request whose client left, it reports the bytes as written, so the
// Transport does not send that request again elsewhere; for a later
// request that got the connection from the idle pool, it reports nothing
// written (its first write), so the Transport sends it on another
// connection.
func (c *appConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	by, owner := c.poisonedBy, c.owner
	c.mu.Unlock()
	if by != nil {
		if by == owner {
			return len(b), errHalfClosed
		}
		return 0, errHalfClosed
	}
	return c.Conn.Write(b)
}

// Read reports the end of a half-closed connection as errHalfClosed
// rather than io.EOF (see above). For the request whose client left,
// either ends its answer: nobody reads it.
func (c *appConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err == io.EOF {
		c.mu.Lock()
		poisoned := c.poisonedBy != nil
		c.mu.Unlock()
		if poisoned {
			err = errHalfClosed
		}
	}
	return n, err
}

// take records that req got the connection.
func (c *appConn) take(req *appRequest) {
	c.mu.Lock()
	c.owner = req
	c.mu.Unlock()
}

// halfClose shuts the connection's writing side for good, on behalf of
// the request by, if by still has it: once its answer was read, the
// connection may already serve another request, which must not be cut.
func (c *appConn) halfClose(by *appRequest) {
	c.mu.Lock()
	if c.owner != by || c.poisonedBy != nil {
		c.mu.Unlock()
		return
	}
	c.poisonedBy = by
	c.mu.Unlock()
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

// appRequest follows one request to the app: which connection it got, so
// that a client leaving can half-close it.
type appRequest struct {
	mu     sync.Mutex
	conn   *appConn
	gone   bool
	cancel context.CancelFunc
}

// trace returns ctx with the hook that follows the request.
func (a *appRequest) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			c := i.Conn
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			ac, ok := c.(*appConn)
			if !ok {
				return
			}
			ac.take(a)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.conn = ac
			if a.gone {
				ac.halfClose(a)
			}
		},
	})
}

// clientGone is called when the client left. Before the request has a
// connection it is cancelled (the app never sees it); once it has one, the
// connection is half-closed: whatever part of the request was sent, the
// app is left to answer it or to close the connection, and nothing more is
// sent (see appConn.Write).
func (a *appRequest) clientGone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gone = true
	if a.conn == nil {
		a.cancel()
		return
	}
	a.conn.halfClose(a)
}
