package transfer_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// FuzzFromMessage checks that FromMessage never panics and that every
// request it accepts can only go to the local application: no scheme, no
// host, a path starting with "/", and a request target that does not parse
// as an authority. The seed corpus is in testdata/fuzz/FuzzFromMessage.
func FuzzFromMessage(f *testing.F) {
	f.Add("GET", "/", "", "example.com", "X-A", "v")
	f.Add("POST", "/work", "ms=5", "h:80", "Content-Type", "text/plain")
	f.Add("GET", "http://evil/x", "", "", "X", "")
	f.Add("GET", "//evil/x", "a=b", "evil", "X", "y")
	f.Add("CONNECT", "/", "", "evil:443", "X", "y")
	f.Add("GET", "/%2F/evil", "", "u@evil", "X", "a\r\nb")
	f.Fuzz(func(t *testing.T, method, path, query, host, hname, hval string) {
		m := &swdv1.ForwardRequest{
			Method:   method,
			Path:     path,
			RawQuery: query,
			Host:     host,
			Headers:  []*swdv1.Header{{Name: hname, Values: []string{hval}}},
			Body:     []byte(hval),
		}
		r, _, err := transfer.FromMessage(context.Background(), m)
		if err != nil {
			if r != nil {
				t.Fatalf("error %v with a non-nil request", err)
			}
			return
		}
		if r.URL.Host != "" || r.URL.Scheme != "" || r.URL.User != nil || r.URL.Opaque != "" {
			t.Fatalf("accepted URL names a destination: %#v (path %q)", r.URL, path)
		}
		if !strings.HasPrefix(r.URL.Path, "/") {
			t.Fatalf("accepted path %q does not start with /", r.URL.Path)
		}
		target := r.URL.RequestURI()
		if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") {
			t.Fatalf("request target %q is not origin-form", target)
		}
		if u, err := url.ParseRequestURI(target); err == nil && (u.Host != "" || u.Scheme != "") {
			t.Fatalf("request target %q re-parses with a host", target)
		}
		if method == "CONNECT" || r.Method != method {
			t.Fatalf("method %q accepted as %q", method, r.Method)
		}
		if strings.ContainsAny(r.Host, "/@\r\n") {
			t.Fatalf("host %q accepted", r.Host)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("header %q value %q accepted", k, v)
				}
			}
		}
		if r.ContentLength != int64(len(hval)) {
			t.Fatalf("content length %d, want %d", r.ContentLength, len(hval))
		}
	})
}
