package transfer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// hopHeaders are removed before a request leaves this node: they describe
// the client's connection to us, not the request (RFC 9110 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// Outbound describes a waiting request about to leave this node.
type Outbound struct {
	ID      string
	Request *http.Request
	Body    []byte
	Arrival time.Time
	Hops    int // hops so far (0 for a request that arrived from a client)
	From    string
	// Dispatched marks requests sent by a dispatcher (rr, ct).
	Dispatched bool
	// PullID is the receiver's pull this request answers (0: pushed).
	PullID uint64
}

// ToMessage converts a request into the wire message. Only the path and
// query of the URL travel; scheme and host never do.
func ToMessage(o Outbound) *swdv1.ForwardRequest {
	r := o.Request
	h := r.Header.Clone()
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	headers := make([]*swdv1.Header, 0, len(h))
	for k, v := range h {
		headers = append(headers, &swdv1.Header{Name: k, Values: v})
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	return &swdv1.ForwardRequest{
		RequestId:       o.ID,
		Method:          r.Method,
		Path:            path,
		RawQuery:        r.URL.RawQuery,
		Headers:         headers,
		Body:            o.Body,
		ArrivalUnixNano: o.Arrival.UnixNano(),
		Hops:            uint32(o.Hops + 1),
		FromNode:        o.From,
		Host:            r.Host,
		RemoteAddr:      r.RemoteAddr,
		Scheme:          scheme,
		Dispatched:      o.Dispatched,
		PullId:          o.PullID,
	}
}

// Inbound is a transferred request as the receiving node sees it.
type Inbound struct {
	ID         string
	Arrival    time.Time
	Hops       int
	From       string
	Dispatched bool
	Scheme     string
	// Streamed marks a request that came by ForwardStream: its body is
	// still arriving, and the Backend must read it (exactly
	// Request.ContentLength bytes) before it queues the request.
	Streamed bool
	// PullID is the pull of this node's the request answers (0: pushed).
	PullID uint64
}

// FromMessage converts a wire message into an HTTP request bound to ctx,
// for the local application only: the URL carries no scheme or host (the
// local proxy fills in the app's), an absolute URL or a path that does not
// start with a single "/" is rejected, and the method must be a valid token.
// The message's host only becomes the Host header.
func FromMessage(ctx context.Context, m *swdv1.ForwardRequest) (*http.Request, Inbound, error) {
	if !validMethod(m.GetMethod()) {
		return nil, Inbound{}, fmt.Errorf("%w: invalid method %q", swderr.ErrBadRequest, m.GetMethod())
	}
	if m.GetMethod() == http.MethodConnect {
		return nil, Inbound{}, fmt.Errorf("%w: CONNECT is not transferable", swderr.ErrBadRequest)
	}
	p := m.GetPath()
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return nil, Inbound{}, fmt.Errorf("%w: path must start with a single \"/\", got %q", swderr.ErrBadRequest, p)
	}
	u, err := url.ParseRequestURI(p)
	if err != nil {
		return nil, Inbound{}, fmt.Errorf("%w: bad path %q: %w", swderr.ErrBadRequest, p, err)
	}
	if u.Scheme != "" || u.Host != "" || u.User != nil {
		return nil, Inbound{}, fmt.Errorf("%w: path names a host: %q", swderr.ErrBadRequest, p)
	}
	for _, c := range []byte(m.GetRawQuery()) {
		if c < 0x21 || c == 0x7f || c == '#' {
			return nil, Inbound{}, fmt.Errorf("%w: bad query: control character, space or '#'", swderr.ErrBadRequest)
		}
	}
	u.RawQuery = m.GetRawQuery()
	if strings.ContainsAny(m.GetHost(), " /\r\n\t@") {
		return nil, Inbound{}, fmt.Errorf("%w: bad host header %q", swderr.ErrBadRequest, m.GetHost())
	}
	h := make(http.Header, len(m.GetHeaders()))
	for _, f := range m.GetHeaders() {
		name := f.GetName()
		if !validToken(name) {
			return nil, Inbound{}, fmt.Errorf("%w: invalid header name %q", swderr.ErrBadRequest, name)
		}
		for _, v := range f.GetValues() {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, Inbound{}, fmt.Errorf("%w: invalid value for header %q", swderr.ErrBadRequest, name)
			}
			h.Add(name, v)
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	h.Del("Content-Length")
	body := m.GetBody()
	r, err := http.NewRequestWithContext(ctx, m.GetMethod(), "/", bytes.NewReader(body))
	if err != nil {
		return nil, Inbound{}, fmt.Errorf("%w: %w", swderr.ErrBadRequest, err)
	}
	r.URL = u
	r.RequestURI = u.RequestURI()
	r.Header = h
	r.Host = m.GetHost()
	r.RemoteAddr = m.GetRemoteAddr()
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body = http.NoBody
	}
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	scheme := m.GetScheme()
	if scheme != "https" {
		scheme = "http"
	}
	in := Inbound{
		ID:         m.GetRequestId(),
		Arrival:    time.Unix(0, m.GetArrivalUnixNano()),
		Hops:       int(m.GetHops()),
		From:       m.GetFromNode(),
		Dispatched: m.GetDispatched(),
		Scheme:     scheme,
		PullID:     m.GetPullId(),
	}
	return r, in, nil
}

// Transferable reports whether a client request can be carried by a
// ForwardRequest that FromMessage on the peer accepts (its path, query and
// Host pass the same checks), so that only such requests are marked
// transferable. It does not allocate.
func Transferable(r *http.Request) bool {
	if r.Method == http.MethodConnect || !validMethod(r.Method) {
		return false
	}
	p := r.URL.EscapedPath()
	if p != "" && (!strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//")) {
		return false
	}
	for i := 0; i < len(r.URL.RawQuery); i++ {
		if c := r.URL.RawQuery[i]; c < 0x21 || c == 0x7f || c == '#' {
			return false
		}
	}
	return !strings.ContainsAny(r.Host, " /\r\n\t@")
}

func validMethod(m string) bool { return m != "" && validToken(m) }

// ValidMethod reports whether m is an RFC 9110 method token (as a
// transferred request's method must be).
func ValidMethod(m string) bool { return validMethod(m) }

// validToken reports whether s is an RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func toHeaders(h http.Header) []*swdv1.Header {
	out := make([]*swdv1.Header, 0, len(h))
	for k, v := range h {
		out = append(out, &swdv1.Header{Name: k, Values: v})
	}
	return out
}
