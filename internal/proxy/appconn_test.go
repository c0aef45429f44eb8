package proxy

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A half-closed app connection sends end-of-file to the app, keeps
// reading, and refuses every later write: for the request whose client
// left as if written (no resend elsewhere), for any later request as not
// written (the Transport sends it on another connection).
func TestAppConnHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := &appConn{Conn: raw}
	t.Cleanup(func() { _ = c.Close() })
	app := <-accepted
	t.Cleanup(func() { _ = app.Close() })

	left, later := &appRequest{}, &appRequest{}
	c.take(left)
	n, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.NoError(t, err)
	assert.Equal(t, 18, n)
	c.halfClose(left)
	got, err := io.ReadAll(app) // the app sees the request, then end-of-file
	require.NoError(t, err)
	assert.Equal(t, "GET / HTTP/1.1\r\n\r\n", string(got))
	_, err = app.Write([]byte("answer"))
	require.NoError(t, err)
	buf := make([]byte, 6)
	_, err = io.ReadFull(c, buf) // swd still reads the answer
	require.NoError(t, err)
	assert.Equal(t, "answer", string(buf))

	n, err = c.Write([]byte("more"))
	assert.ErrorIs(t, err, errHalfClosed)
	assert.Equal(t, 4, n, "the abandoned request's write counts as written: not resent")
	c.take(later)
	n, err = c.Write([]byte("next"))
	assert.ErrorIs(t, err, errHalfClosed)
	assert.Zero(t, n, "a later request's write counts as not written: sent elsewhere")

	// The app closes the connection once it has answered: that end of file
	// must not read as an idle connection the server closed, which
	// net/http would not retry for a POST that picked it just then.
	require.NoError(t, app.Close())
	_, err = c.Read(buf)
	assert.ErrorIs(t, err, errHalfClosed)
	assert.NotErrorIs(t, err, io.EOF)
}

// A connection that was never half-closed reports the app's close as the
// plain end of file.
func TestAppConnEOFWhenNotHalfClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.Close()
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := &appConn{Conn: raw}
	t.Cleanup(func() { _ = c.Close() })
	c.take(&appRequest{})
	_, err = c.Read(make([]byte, 1))
	assert.Equal(t, io.EOF, err)
}

// A client that leaves after its answer was read does not cut the
// connection the next request already uses.
func TestAppConnNotCutForNextOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := &appConn{Conn: raw}
	t.Cleanup(func() { _ = c.Close() })
	old, next := &appRequest{}, &appRequest{}
	c.take(old)
	c.take(next) // the idle pool handed the connection on
	c.halfClose(old)
	n, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.NoError(t, err, "the next request's connection was cut")
	assert.Equal(t, 18, n)
}
