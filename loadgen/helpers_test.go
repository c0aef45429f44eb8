package loadgen

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// sleepServer stands in for a node: GET /work?ms=X sleeps X ms (capped)
// and answers 200 with X-Served-By; it records the sizes it saw.
type sleepServer struct {
	*httptest.Server
	name string
	// fail, if set, makes the server answer 500 to sizes above it.
	fail float64

	mu    sync.Mutex
	sizes []string
}

func newSleepServer(t *testing.T, name string) *sleepServer {
	t.Helper()
	s := &sleepServer{name: name}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("ms")
		v, err := strconv.ParseFloat(q, 64)
		if r.URL.Path != "/work" || err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, q)
		fail := s.fail
		s.mu.Unlock()
		time.Sleep(time.Duration(min(v, 50) * float64(time.Millisecond)))
		w.Header().Set("X-Served-By", s.name)
		if fail > 0 && v > fail {
			http.Error(w, "too big", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sleepServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sizes...)
}
