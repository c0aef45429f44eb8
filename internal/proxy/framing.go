package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// FramingGuard wraps a client listener so that every HTTP/1 request head is
// checked before net/http parses it, for the framing ambiguities net/http
// silently resolves and a front end may resolve differently (request
// smuggling, RFC 9112 6.3 and 5.2):
//
//   - both Content-Length and Transfer-Encoding (net/http drops
//     Content-Length and reads chunked);
//   - obs-fold: a header line continued on a line starting with space or
//     tab (net/http joins it);
//   - Content-Length values that are not one plain number (net/http
//     accepts repeated identical values; a front end may not).
//
// Lines may end in CRLF or, as net/http also accepts, a bare LF.
//
// Such a head gets 400 and the connection is closed; nothing of it reaches
// the handler. The guard follows Content-Length bodies to find the next
// head on a keep-alive connection; after a head with Transfer-Encoding it
// stops looking, because the handler answers such requests with
// "Connection: close" (see ServeHTTP), so no further head is read. HTTP/2
// (prior knowledge) connections are passed through untouched.
//
// Concurrency: each wrapped connection is read by one goroutine (net/http's);
// the guard keeps per-connection state only.
func FramingGuard(l net.Listener, maxHeaderBytes int) net.Listener {
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = http.DefaultMaxHeaderBytes // what net/http reads then
	}
	return &guardListener{Listener: l, max: maxHeaderBytes + 4096}
}

type guardListener struct {
	net.Listener
	max int
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c, max: l.max}, nil
}

type guardState int

const (
	gsHead guardState = iota // accumulating a request head
	gsBody                   // skipping a Content-Length body
	gsPass                   // no more checks on this connection
)

type guardConn struct {
	net.Conn
	max   int
	mu    sync.Mutex
	state guardState
	head  []byte // the head seen so far (state gsHead)
	left  int64  // body bytes left to skip (state gsBody)
	heads int    // heads passed on
	bad   bool
}

var (
	h2Preface  = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	badFraming = []byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(badFramingBody)) + "\r\n\r\n" + badFramingBody)
)

const badFramingBody = "swd: ambiguous request framing (possible request smuggling)\n"

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.inspect(p[:n]) {
		// Refuse: answer 400 if nothing was passed on yet (no answer to an
		// earlier request can be under way), then close.
		if c.heads == 0 {
			_, _ = c.Conn.Write(badFraming)
		}
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}

// inspect follows the byte stream; it reports true when a head must be
// refused.
func (c *guardConn) inspect(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bad {
		return true
	}
	for len(b) > 0 {
		switch c.state {
		case gsPass:
			return false
		case gsBody:
			skip := min(int64(len(b)), c.left)
			c.left -= skip
			b = b[skip:]
			if c.left == 0 {
				c.state = gsHead
			}
		case gsHead:
			// Leading empty lines before a request line are allowed.
			if len(c.head) == 0 {
				for len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
					b = b[1:]
				}
				if len(b) == 0 {
					return false
				}
			}
			start := max(0, len(c.head)-3)
			c.head = append(c.head, b...)
			if c.heads == 0 && bytes.HasPrefix(h2Preface, c.head[:min(len(c.head), len(h2Preface))]) {
				if len(c.head) >= len(h2Preface) {
					c.state, c.head = gsPass, nil // HTTP/2 with prior knowledge
				}
				return false // not yet known
			}
			end := headEnd(c.head, start)
			if end < 0 {
				if len(c.head) > c.max {
					c.state = gsPass // net/http answers 431
					c.head = nil
				}
				return false
			}
			rest := c.head[end:]
			verdict, bodyLen := checkHead(c.head[:end])
			b = append([]byte(nil), rest...)
			c.head = c.head[:0]
			switch verdict {
			case headBad:
				c.bad = true
				return true
			case headChunked:
				c.state = gsPass
				c.heads++
				return false
			}
			c.heads++
			if bodyLen > 0 {
				c.state, c.left = gsBody, bodyLen
			}
		}
	}
	return false
}

type headVerdict int

const (
	headOK      headVerdict = iota
	headBad                 // refuse
	headChunked             // has Transfer-Encoding: stop following
)

// headEnd returns the index just past the empty line that ends the head in
// b, looking from index from on (a few bytes before new data), or -1. Like
// net/http, it takes LF and CRLF as line ends.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// headLines splits a complete head into its lines, without line ends and
// without the empty line that ends it.
func headLines(h []byte) [][]byte {
	lines := bytes.Split(h, []byte("\n"))
	out := lines[:0]
	for _, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) == 0 {
			break
		}
		out = append(out, l)
	}
	return out
}

// checkHead inspects one complete request head (ending in an empty line).
func checkHead(h []byte) (headVerdict, int64) {
	lines := headLines(h)
	if len(lines) == 0 {
		return headOK, 0
	}
	var cl [][]byte
	te := false
	for i, line := range lines {
		if i == 0 {
			continue // request line
		}
		if line[0] == ' ' || line[0] == '\t' {
			return headBad, 0 // obs-fold
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue // net/http rejects malformed lines itself
		}
		name := line[:colon]
		value := bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl = append(cl, value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		}
	}
	switch {
	case te && len(cl) > 0:
		return headBad, 0
	case te && bytes.HasSuffix(lines[0], []byte("HTTP/1.0")):
		// HTTP/1.0 has no chunked coding; net/http drops the header, and a
		// front end may not (RFC 9112 6.1).
		return headBad, 0
	case te:
		return headChunked, 0
	case len(cl) == 0:
		return headOK, 0
	}
	// net/http accepts repeated identical values; the guard follows the
	// body they announce (and refuses anything else, which net/http would
	// answer 400 anyway).
	for _, v := range cl[1:] {
		if !bytes.Equal(v, cl[0]) {
			return headBad, 0
		}
	}
	n, err := strconv.ParseInt(string(cl[0]), 10, 64)
	if err != nil || n < 0 || cl[0][0] == '+' {
		return headBad, 0
	}
	return headOK, n
}
