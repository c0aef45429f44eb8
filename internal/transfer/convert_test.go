package transfer_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// headerMap turns the wire headers into an http.Header for assertions.
func headerMap(hs []*swdv1.Header) http.Header {
	h := http.Header{}
	for _, f := range hs {
		for _, v := range f.GetValues() {
			h.Add(f.GetName(), v)
		}
	}
	return h
}

func TestToMessage(t *testing.T) {
	arrival := time.Unix(1700000000, 123456789)
	tests := []struct {
		name string
		// req builds the request to convert.
		req  func() *http.Request
		hops int
		body []byte
		// check inspects the message.
		check func(t *testing.T, m *swdv1.ForwardRequest)
	}{
		{
			// Hop-by-hop headers (RFC 9110 7.6.1) and the headers the
			// Connection header names never leave the node; end-to-end
			// headers do, with all their values.
			name: "strips hop-by-hop headers and those named in Connection",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "http://front.example/a", nil)
				for _, h := range []string{"Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
					"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
					r.Header.Set(h, "x")
				}
				r.Header.Add("Connection", "keep-alive, X-Conn-Hop")
				r.Header.Add("Connection", "x-other-hop")
				r.Header.Set("X-Conn-Hop", "secret")
				r.Header.Set("X-Other-Hop", "secret")
				r.Header.Add("X-Keep", "1")
				r.Header.Add("X-Keep", "2")
				r.Header.Set("Authorization", "Bearer t")
				return r
			},
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				h := headerMap(m.GetHeaders())
				assert.Equal(t, http.Header{
					"X-Keep":        {"1", "2"},
					"Authorization": {"Bearer t"},
				}, h)
			},
		},
		{
			// An absolute-form request URL only contributes path and query:
			// scheme and host never travel (host travels as the Host
			// header only, from r.Host).
			name: "carries path and query only",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "http://evil.example:8080/a%2Fb/c?x=1&y=%20", nil)
				r.Host = "client.example"
				return r
			},
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, "/a%2Fb/c", m.GetPath())
				assert.Equal(t, "x=1&y=%20", m.GetRawQuery())
				assert.Equal(t, "client.example", m.GetHost())
				assert.Equal(t, http.MethodPost, m.GetMethod())
				assert.NotContains(t, m.GetPath(), "evil")
				assert.NotContains(t, m.GetRawQuery(), "evil")
			},
		},
		{
			// A URL with no path becomes "/".
			name: "empty path becomes slash",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.URL.Path = ""
				return r
			},
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, "/", m.GetPath())
			},
		},
		{
			// Hops counts this transfer too: a client request (0 hops so
			// far) travels with hops=1.
			name: "hops incremented from zero",
			req:  func() *http.Request { return httptest.NewRequest(http.MethodGet, "/", nil) },
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, uint32(1), m.GetHops())
			},
		},
		{
			// A request that already moved once travels with hops=3 after
			// two earlier hops.
			name: "hops incremented from two",
			req:  func() *http.Request { return httptest.NewRequest(http.MethodGet, "/", nil) },
			hops: 2,
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, uint32(3), m.GetHops())
			},
		},
		{
			// Metadata: id, arrival, sender, remote address, plain scheme,
			// body bytes.
			name: "metadata and body",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodPut, "/up", strings.NewReader("ignored: the buffered body travels"))
				r.RemoteAddr = "10.1.2.3:4567"
				return r
			},
			body: []byte("payload"),
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, "id-1", m.GetRequestId())
				assert.Equal(t, arrival.UnixNano(), m.GetArrivalUnixNano())
				assert.Equal(t, "node-a", m.GetFromNode())
				assert.Equal(t, "10.1.2.3:4567", m.GetRemoteAddr())
				assert.Equal(t, "http", m.GetScheme())
				assert.Equal(t, []byte("payload"), m.GetBody())
				assert.True(t, m.GetDispatched())
			},
		},
		{
			// A TLS client connection is reported as https.
			name: "tls means https",
			req: func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.TLS = &tls.ConnectionState{}
				return r
			},
			check: func(t *testing.T, m *swdv1.ForwardRequest) {
				assert.Equal(t, "https", m.GetScheme())
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req()
			before := r.Header.Clone()
			m := transfer.ToMessage(transfer.Outbound{
				ID: "id-1", Request: r, Body: tc.body, Arrival: arrival, Hops: tc.hops,
				From: "node-a", Dispatched: true,
			})
			tc.check(t, m)
			assert.Equal(t, before, r.Header, "ToMessage must not modify the request's headers")
		})
	}
}

// validMessage is a message FromMessage accepts; cases mutate a copy.
func validMessage() *swdv1.ForwardRequest {
	return &swdv1.ForwardRequest{
		RequestId:       "req-1",
		Method:          http.MethodPost,
		Path:            "/work",
		RawQuery:        "ms=5&x=%20y",
		Headers:         []*swdv1.Header{{Name: "X-App", Values: []string{"a", "b"}}, {Name: "Content-Type", Values: []string{"text/plain"}}},
		Body:            []byte("hello body"),
		ArrivalUnixNano: 1700000000123456789,
		Hops:            1,
		FromNode:        "node-a",
		Host:            "client.example:8080",
		RemoteAddr:      "10.0.0.9:5555",
		Scheme:          "https",
		Dispatched:      true,
	}
}

// addHeader returns a mutation that appends a header field to a message.
func addHeader(name string, values ...string) func(m *swdv1.ForwardRequest) {
	return func(m *swdv1.ForwardRequest) {
		m.Headers = append(m.Headers, &swdv1.Header{Name: name, Values: values})
	}
}

func TestFromMessageRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(m *swdv1.ForwardRequest)
	}{
		// Methods must be non-empty RFC 9110 tokens.
		{"empty method", func(m *swdv1.ForwardRequest) { m.Method = "" }},
		{"method with space", func(m *swdv1.ForwardRequest) { m.Method = "GE T" }},
		{"method with CRLF", func(m *swdv1.ForwardRequest) { m.Method = "GET\r\nX: y" }},
		{"method with separator", func(m *swdv1.ForwardRequest) { m.Method = "GET/" }},
		{"method non-ascii", func(m *swdv1.ForwardRequest) { m.Method = "GÉT" }},
		// CONNECT would turn the app connection into a tunnel.
		{"connect", func(m *swdv1.ForwardRequest) { m.Method = http.MethodConnect }},
		// The path must start with exactly one "/".
		{"empty path", func(m *swdv1.ForwardRequest) { m.Path = "" }},
		{"relative path", func(m *swdv1.ForwardRequest) { m.Path = "work" }},
		{"asterisk form", func(m *swdv1.ForwardRequest) { m.Path = "*" }},
		// Absolute URLs and network-path references name another host.
		{"absolute url", func(m *swdv1.ForwardRequest) { m.Path = "http://evil/x" }},
		{"scheme-relative url", func(m *swdv1.ForwardRequest) { m.Path = "//evil/x" }},
		{"triple slash", func(m *swdv1.ForwardRequest) { m.Path = "///evil/x" }},
		// Userinfo can only appear in an authority, which is rejected.
		{"userinfo in authority", func(m *swdv1.ForwardRequest) { m.Path = "//user:pass@evil/x" }},
		{"userinfo in absolute url", func(m *swdv1.ForwardRequest) { m.Path = "http://user@evil/x" }},
		// Control characters and broken escapes make the path unparsable.
		{"path with newline", func(m *swdv1.ForwardRequest) { m.Path = "/a\nb" }},
		{"path with NUL", func(m *swdv1.ForwardRequest) { m.Path = "/a\x00" }},
		{"path with bad escape", func(m *swdv1.ForwardRequest) { m.Path = "/%zz" }},
		// Query characters that would split or end the request line.
		{"query with space", func(m *swdv1.ForwardRequest) { m.RawQuery = "a=b HTTP/1.1" }},
		{"query with CR", func(m *swdv1.ForwardRequest) { m.RawQuery = "a=b\r" }},
		{"query with LF", func(m *swdv1.ForwardRequest) { m.RawQuery = "a=b\nX: y" }},
		{"query with fragment", func(m *swdv1.ForwardRequest) { m.RawQuery = "a=b#frag" }},
		// Header names must be tokens.
		{"empty header name", addHeader("", "v")},
		{"header name with space", addHeader("X Bad", "v")},
		{"header name with colon", addHeader("X:Bad", "v")},
		{"header name with CRLF", addHeader("X\r\nBad", "v")},
		// Header values must not contain CR, LF or NUL (header injection).
		{"header value with CR", addHeader("X-V", "a\rb")},
		{"header value with LF", addHeader("X-V", "ok", "a\nX-Injected: 1")},
		{"header value with NUL", addHeader("X-V", "a\x00b")},
		// The Host header may not carry a path or userinfo.
		{"host with slash", func(m *swdv1.ForwardRequest) { m.Host = "evil/x" }},
		{"host with at", func(m *swdv1.ForwardRequest) { m.Host = "user@evil" }},
		{"host with space", func(m *swdv1.ForwardRequest) { m.Host = "a b" }},
		{"host with CRLF", func(m *swdv1.ForwardRequest) { m.Host = "a\r\nX: y" }},
		{"host with tab", func(m *swdv1.ForwardRequest) { m.Host = "a\tb" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := validMessage()
			tc.mutate(m)
			r, in, err := transfer.FromMessage(context.Background(), m)
			require.Error(t, err)
			assert.ErrorIs(t, err, swderr.ErrBadRequest)
			assert.Nil(t, r)
			assert.Equal(t, transfer.Inbound{}, in)
		})
	}
}

// TestFromMessageRejectsControlCharsInQuery: the query must be as clean as
// the path. FromMessage only rejects space, CR, LF and '#', so other
// control characters reach the app hop, where net/http refuses to write
// them (502 instead of a 400 at the door).
func TestFromMessageRejectsControlCharsInQuery(t *testing.T) {
	tests := []struct {
		name  string
		query string
	}{
		// NUL.
		{"NUL", "a=\x00"},
		// TAB is whitespace some parsers split the request line on.
		{"TAB", "a=\tHTTP/1.0"},
		// DEL.
		{"DEL", "a=\x7f"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := validMessage()
			m.RawQuery = tc.query
			_, _, err := transfer.FromMessage(context.Background(), m)
			assert.ErrorIs(t, err, swderr.ErrBadRequest)
		})
	}
}

func TestFromMessageAccepts(t *testing.T) {
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "bound")
	tests := []struct {
		name   string
		mutate func(m *swdv1.ForwardRequest)
		check  func(t *testing.T, r *http.Request, in transfer.Inbound)
	}{
		{
			// The URL has no scheme or host, so the request can only go to
			// the local app; the message host only becomes the Host header.
			name:   "url is local only, host becomes Host header",
			mutate: func(*swdv1.ForwardRequest) {},
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Empty(t, r.URL.Scheme)
				assert.Empty(t, r.URL.Host)
				assert.Nil(t, r.URL.User)
				assert.Equal(t, "/work", r.URL.Path)
				assert.Equal(t, "ms=5&x=%20y", r.URL.RawQuery)
				assert.Equal(t, "/work?ms=5&x=%20y", r.RequestURI)
				assert.Equal(t, "client.example:8080", r.Host)
				assert.Equal(t, http.MethodPost, r.Method)
				assert.Equal(t, "10.0.0.9:5555", r.RemoteAddr)
				assert.Equal(t, "bound", r.Context().Value(ctxKey{}), "request is bound to ctx")
				assert.Equal(t, []string{"a", "b"}, r.Header.Values("X-App"))
				assert.Equal(t, "text/plain", r.Header.Get("Content-Type"))
			},
		},
		{
			// Body, ContentLength and a GetBody that can be called again.
			name:   "body, content length, get body",
			mutate: func(*swdv1.ForwardRequest) {},
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Equal(t, int64(len("hello body")), r.ContentLength)
				b, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				assert.Equal(t, "hello body", string(b))
				for range 2 {
					require.NotNil(t, r.GetBody)
					rc, err := r.GetBody()
					require.NoError(t, err)
					b, err = io.ReadAll(rc)
					require.NoError(t, err)
					assert.Equal(t, "hello body", string(b))
				}
			},
		},
		{
			// No body: http.NoBody and length 0, as net/http expects.
			name:   "empty body",
			mutate: func(m *swdv1.ForwardRequest) { m.Body = nil; m.Method = http.MethodGet },
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Equal(t, http.NoBody, r.Body)
				assert.Zero(t, r.ContentLength)
			},
		},
		{
			// Inbound carries the message's metadata.
			name:   "inbound metadata",
			mutate: func(*swdv1.ForwardRequest) {},
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Equal(t, transfer.Inbound{
					ID: "req-1", Arrival: time.Unix(0, 1700000000123456789), Hops: 1,
					From: "node-a", Dispatched: true, Scheme: "https",
				}, in)
			},
		},
		{
			// Any scheme but https is reported as http.
			name:   "unknown scheme becomes http",
			mutate: func(m *swdv1.ForwardRequest) { m.Scheme = "gopher" },
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Equal(t, "http", in.Scheme)
			},
		},
		{
			// Hop-by-hop headers and a stale Content-Length in the message
			// are dropped; the body's real length is used.
			name: "drops hop-by-hop and content-length headers",
			mutate: func(m *swdv1.ForwardRequest) {
				for _, n := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization", "Content-Length"} {
					m.Headers = append(m.Headers, &swdv1.Header{Name: n, Values: []string{"99"}})
				}
			},
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				for _, n := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization", "Content-Length"} {
					assert.Empty(t, r.Header.Values(n), n)
				}
				assert.Equal(t, int64(len("hello body")), r.ContentLength)
			},
		},
		{
			// An escaped slash stays escaped on the wire: the decoded path
			// starts with "//" but the request target does not.
			name:   "escaped slash",
			mutate: func(m *swdv1.ForwardRequest) { m.Path = "/%2F/evil"; m.RawQuery = "" },
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Empty(t, r.URL.Host)
				assert.Equal(t, "/%2F/evil", r.URL.EscapedPath())
				assert.Equal(t, "/%2F/evil", r.RequestURI)
			},
		},
		{
			// Non-ASCII query bytes are allowed (Go's server accepts them too).
			name:   "non-ascii query",
			mutate: func(m *swdv1.ForwardRequest) { m.RawQuery = "q=é" },
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Equal(t, "q=é", r.URL.RawQuery)
			},
		},
		{
			// An empty Host is allowed: the proxy then uses the app's.
			name:   "empty host",
			mutate: func(m *swdv1.ForwardRequest) { m.Host = "" },
			check: func(t *testing.T, r *http.Request, in transfer.Inbound) {
				assert.Empty(t, r.Host)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := validMessage()
			tc.mutate(m)
			r, in, err := transfer.FromMessage(ctx, m)
			require.NoError(t, err)
			require.NotNil(t, r)
			tc.check(t, r, in)
		})
	}
}

// TestRoundTrip: a request converted with ToMessage and back with
// FromMessage keeps method, path, query, end-to-end headers, host and body.
func TestRoundTrip(t *testing.T) {
	r := httptest.NewRequest(http.MethodPatch, "http://ignored.example/a/b%20c?d=e&f=%2F", nil)
	r.Host = "client.example"
	r.Header.Set("X-Trace", "t1")
	r.Header.Set("Connection", "X-Hop")
	r.Header.Set("X-Hop", "h")
	m := transfer.ToMessage(transfer.Outbound{ID: "rt", Request: r, Body: []byte("xyz"), Arrival: time.Unix(5, 0), From: "node-a"})
	got, in, err := transfer.FromMessage(context.Background(), m)
	require.NoError(t, err)
	assert.Equal(t, http.MethodPatch, got.Method)
	assert.Equal(t, "/a/b%20c", got.URL.EscapedPath())
	assert.Equal(t, "d=e&f=%2F", got.URL.RawQuery)
	assert.Equal(t, "client.example", got.Host)
	assert.Equal(t, "t1", got.Header.Get("X-Trace"))
	assert.Empty(t, got.Header.Get("X-Hop"))
	assert.Equal(t, 1, in.Hops)
	assert.Equal(t, time.Unix(5, 0), in.Arrival)
	b, err := io.ReadAll(got.Body)
	require.NoError(t, err)
	assert.Equal(t, "xyz", string(b))
}

func TestTransferable(t *testing.T) {
	cases := []struct {
		name   string // what the request looks like
		method string
		target string
		host   string
		want   bool
	}{
		// An ordinary request moves.
		{"plain", http.MethodGet, "/work?ms=5", "svc", true},
		// A path net/http accepts but the peer would refuse stays local.
		{"double slash", http.MethodGet, "//work", "svc", false},
		// A percent-encoded control character in the query is fine.
		{"encoded tab in query", http.MethodGet, "/work?a=%09", "svc", true},
		// CONNECT never moves.
		{"connect", http.MethodConnect, "/", "svc", false},
		// A Host with a slash would be refused by the peer.
		{"bad host", http.MethodGet, "/", "a/b", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "http://x"+tc.target, nil)
			r.Host = tc.host
			assert.Equal(t, tc.want, transfer.Transferable(r))
			if tc.want {
				_, _, err := transfer.FromMessage(context.Background(), transfer.ToMessage(transfer.Outbound{Request: r}))
				assert.NoError(t, err, "a transferable request must be accepted by the peer")
			}
		})
	}
}
