package proxy

import (
	"bytes"
	"net"
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
//     tab (net/http joins it).
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

var ()

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
			end := bytes.Index(c.head[start:], []byte("\r\n\r\n"))
			if end < 0 {
				if len(c.head) > c.max {
					c.state = gsPass // net/http answers 431
					c.head = nil
				}
				return false
			}
			end += start + 4
			rest := c.head[end:]
			verdict, bodyLen := checkHead(c.head[:end])
			b = append([]byte(nil), rest...)
			c.head = c.head[:0]
			switch verdict {
			case headBad:
				c.bad = true
				return true
			case headChunked, headUnsure:
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
	headUnsure              // let net/http decide (it rejects or closes)
)

// checkHead inspects one complete request head (ending in CRLFCRLF).
func checkHead(h []byte) (headVerdict, int64) {
	lines := bytes.Split(h[:len(h)-4], []byte("\r\n"))
	var cl [][]byte
	te := false
	for i, line := range lines {
		if i == 0 {
			continue // request line
		}
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
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
	case len(cl) > 1:
		return headUnsure, 0
	}
	n, err := strconv.ParseInt(string(cl[0]), 10, 64)
	if err != nil || n < 0 || cl[0][0] == '+' {
		return headUnsure, 0
	}
	return headOK, n
}
