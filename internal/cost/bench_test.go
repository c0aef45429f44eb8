package cost

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/swd-project/swd/internal/route"
)

// BenchmarkPerRequest is what learning costs adds to every request on a
// node: find its route, predict its cost, count it in service and learn
// its service time (proxy's predict and startService).
func BenchmarkPerRequest(b *testing.B) {
	rt, err := route.New(route.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	ct, err := NewTable(DefaultConfig(), rt.Max())
	if err != nil {
		b.Fatal(err)
	}
	l := NewLedger(nil)
	req := httptest.NewRequest("GET", "/work/light?ms=10", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := int(rt.Of(req))
			s := l.Start(ct.Predict(id))
			_ = ct.Observe(id, l.Finish(s)+10*time.Millisecond)
		}
	})
}
