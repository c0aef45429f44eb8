package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFramingGuardInspect(t *testing.T) {
	get := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	post := func(body string) string {
		return "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
	}
	cases := []struct {
		name   string // the byte stream on one connection
		stream string
		bad    bool
	}{
		// Plain keep-alive requests pass.
		{"two GETs", get + get, false},
		// A Content-Length body that looks like a bad head is skipped, not inspected.
		{"body hiding a bad head", post("X: a\r\n b\r\n\r\n") + get, false},
		// Both Content-Length and Transfer-Encoding: refused.
		{"CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		// The same, on the second request of a connection.
		{"CL and TE after a GET", get + "POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n", true},
		// HTTP/1.0 has no chunked coding: a Transfer-Encoding there is refused.
		{"TE on HTTP/1.0", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		// obs-fold.
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", true},
		// A chunked request alone passes, and nothing after it is inspected
		// (the handler closes the connection after answering it).
		{"chunked then anything", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX: a\r\n b\r\n\r\n", false},
		// HTTP/2 with prior knowledge is not HTTP/1 framing.
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04", false},
		// Two different Content-Lengths: refused.
		{"two content lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", true},
		// Issue 17, item 6: bare-LF line ends (net/http accepts them).
		{"bare LF CL and TE", "POST / HTTP/1.1\nHost: x\nContent-Length: 5\nTransfer-Encoding: chunked\n\n0\n\n", true},
		{"bare LF obs-fold", "GET / HTTP/1.1\nHost: x\nX-A: a\n b\n\n", true},
		{"mixed line ends obs-fold", "GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\tb\n\r\n", true},
		// Bare-LF keep-alive requests pass, bodies are still skipped.
		{"bare LF requests", "POST /b HTTP/1.1\nHost: x\nContent-Length: 9\n\nX: a\n b\n\nGET / HTTP/1.1\nHost: x\n\n", false},
		// Two identical Content-Lengths no longer switch the guard off:
		// the next head is still checked.
		{"identical CLs then CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab" +
			"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"identical CLs then GET", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab" + get, false},
	}
	for _, tc := range cases {
		for _, step := range []int{1, 3, 7, 1 << 20} {
			t.Run(tc.name+"/step "+itoa(step), func(t *testing.T) {
				c := &guardConn{max: 1 << 16}
				bad := false
				for i := 0; i < len(tc.stream) && !bad; i += step {
					bad = c.inspect([]byte(tc.stream[i:min(len(tc.stream), i+step)]))
				}
				assert.Equal(t, tc.bad, bad)
			})
		}
	}
}

func TestCheckHead(t *testing.T) {
	v, n := checkHead([]byte("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"))
	assert.Equal(t, headOK, v)
	assert.EqualValues(t, 12, n)
	v, _ = checkHead([]byte("POST / HTTP/1.1\r\nContent-Length: +12\r\n\r\n"))
	assert.Equal(t, headBad, v, "a signed length")
	v, n = checkHead([]byte("POST / HTTP/1.1\nContent-Length: 7\nContent-Length: 7\n\n"))
	assert.Equal(t, headOK, v, "identical lengths, bare LF")
	assert.EqualValues(t, 7, n)
	v, _ = checkHead([]byte("POST / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 3) + "\r\n"))
	assert.Equal(t, headOK, v)
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}
