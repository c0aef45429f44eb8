package loadgen

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/workload"
)

// Schedule is a run's arrivals, drawn up front from a workload.Generator:
// every arrival before Warmup+Duration, in time order. Arrivals before
// Warmup are sent but not measured.
type Schedule struct {
	Spec     workload.Spec
	Rate     float64
	Seed     uint64
	Warmup   time.Duration
	Duration time.Duration
	Arrivals []workload.Arrival
}

// maxArrivals bounds a schedule (about 1 GiB of results would be worse).
const maxArrivals = 20_000_000

// NewSchedule draws the arrivals of spec at rate requests per second for
// warmup+duration, seeded; the same arguments always give the same
// schedule, and the same arrivals as internal/sim with that seed.
func NewSchedule(spec workload.Spec, rate float64, seed uint64, warmup, duration time.Duration) (Schedule, error) {
	if warmup < 0 {
		return Schedule{}, fmt.Errorf("warm-up must not be negative, got %v", warmup)
	}
	if duration <= 0 {
		return Schedule{}, fmt.Errorf("duration must be positive, got %v", duration)
	}
	g, err := workload.NewGenerator(spec, rate, seed)
	if err != nil {
		return Schedule{}, err
	}
	end := warmup + duration
	if want := rate * end.Seconds(); want > maxArrivals {
		return Schedule{}, fmt.Errorf("rate %v for %v is about %.0f requests, more than the %d a run may hold; shorten --duration", rate, end, want, maxArrivals)
	}
	s := Schedule{Spec: spec, Rate: rate, Seed: seed, Warmup: warmup, Duration: duration}
	s.Arrivals = make([]workload.Arrival, 0, int(rate*end.Seconds()*1.1)+16)
	for {
		a := g.Next()
		if a.At >= end {
			break
		}
		s.Arrivals = append(s.Arrivals, a)
	}
	return s, nil
}

// Measured reports whether arrival k falls in the measured window.
func (s Schedule) Measured(k int) bool { return s.Arrivals[k].At >= s.Warmup }

// SchedulePacer is a vegeta.Pacer that releases hit k at the schedule's
// offset Arrivals[k].At (a burst's requests share an offset, so they leave
// back to back) and stops after the last arrival. It also records when the
// attack began, so results can be measured from their scheduled times.
type SchedulePacer struct {
	at   []time.Duration
	rate float64

	mu    sync.Mutex
	began time.Time
}

var _ vegeta.Pacer = (*SchedulePacer)(nil)

// NewSchedulePacer returns a pacer for s.
func NewSchedulePacer(s Schedule) *SchedulePacer {
	at := make([]time.Duration, len(s.Arrivals))
	for i, a := range s.Arrivals {
		at[i] = a.At
	}
	return &SchedulePacer{at: at, rate: s.Rate}
}

// Pace implements vegeta.Pacer: the wait until hit number hits is due.
func (p *SchedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	p.mu.Lock()
	if p.began.IsZero() {
		p.began = time.Now().Add(-elapsed)
	}
	p.mu.Unlock()
	if hits >= uint64(len(p.at)) {
		return 0, true
	}
	return p.at[hits] - elapsed, false
}

// Rate implements vegeta.Pacer: the schedule's mean rate.
func (p *SchedulePacer) Rate(time.Duration) float64 { return p.rate }

// Began is when the attack began, as seen by the first Pace call (zero
// before it).
func (p *SchedulePacer) Began() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.began
}

// Offset returns the scheduled offset of hit k.
func (p *SchedulePacer) Offset(k uint64) (time.Duration, bool) {
	if k >= uint64(len(p.at)) {
		return 0, false
	}
	return p.at[k], true
}

// Targeter hands vegeta one request per arrival: the k-th call gets
// GET base[k mod len(base)] + path + "?ms=" + size of arrival k; in a mixed
// workload (classes), path + "/" + the arrival's class name + "?ms=...", so
// each class is a route of its own (dummyapp serves /work/NAME as /work).
// Calls past the schedule's end return vegeta.ErrNoTargets.
//
// Requests launched within microseconds of each other (a burst) may reach
// vegeta's sequence numbers in a slightly different order than they took
// their sizes; the multiset of (time, size) pairs is still the schedule's.
type Targeter struct {
	bases []string
	path  string
	sizes []float64
	paths []string // per class: path + "/" + name; nil without classes
	class []uint8  // per arrival (with classes)
	next  atomic.Uint64
	// keys, if set, is the key of each arrival (see Keyed).
	keys    []int
	keySpec KeySpec
}

// Keyed gives arrival k the key keys[k] of ks (KeySpec.Draw with the
// schedule's seed): every request then carries its key (KeySpec.set).
// Call before the attack.
func (tg *Targeter) Keyed(ks KeySpec, keys []int) error {
	if len(keys) != len(tg.sizes) {
		return fmt.Errorf("%d keys for %d arrivals", len(keys), len(tg.sizes))
	}
	tg.keys, tg.keySpec = keys, ks
	return nil
}

// NewTargeter returns a targeter spreading s's requests over bases (base
// URLs such as http://127.0.0.1:8080) round robin, on path (e.g. "/work").
// Give one base to send everything to a dispatcher.
func NewTargeter(s Schedule, bases []string, path string) (*Targeter, error) {
	if len(bases) == 0 {
		return nil, errors.New("no targets to send requests to")
	}
	clean := make([]string, len(bases))
	for i, b := range bases {
		u, err := NormalizeBase(b)
		if err != nil {
			return nil, err
		}
		clean[i] = u
	}
	if path == "" {
		path = "/work"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	sizes := make([]float64, len(s.Arrivals))
	for i, a := range s.Arrivals {
		sizes[i] = a.SizeMs
	}
	tg := &Targeter{bases: clean, path: path, sizes: sizes}
	if cs := s.Spec.Classes; len(cs) > 0 {
		if len(cs) > math.MaxUint8 {
			return nil, fmt.Errorf("workload has %d classes, at most %d", len(cs), math.MaxUint8)
		}
		for _, c := range cs {
			tg.paths = append(tg.paths, strings.TrimRight(path, "/")+"/"+c.Name)
		}
		tg.class = make([]uint8, len(s.Arrivals))
		for i, a := range s.Arrivals {
			tg.class[i] = uint8(a.Class)
		}
	}
	return tg, nil
}

// Target fills t with the next request; it is a vegeta.Targeter.
func (tg *Targeter) Target(t *vegeta.Target) error {
	k := tg.next.Add(1) - 1
	if k >= uint64(len(tg.sizes)) {
		return vegeta.ErrNoTargets
	}
	t.Method = http.MethodGet
	path := tg.path
	if tg.paths != nil {
		path = tg.paths[tg.class[k]]
	}
	t.URL = tg.bases[k%uint64(len(tg.bases))] + path + "?ms=" + FormatMs(tg.sizes[k])
	t.Body = nil
	t.Header = nil
	if tg.keys != nil {
		t.Header = http.Header{}
		tg.keySpec.set(t.Header, tg.keys[k])
	}
	return nil
}

// FormatMs renders a size in ms with microsecond precision.
func FormatMs(v float64) string {
	if math.IsNaN(v) || v < 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// NormalizeBase turns "127.0.0.1:8080" or "http://host:8080/" into
// "http://127.0.0.1:8080" / "http://host:8080".
func NormalizeBase(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty target address (use HOST:PORT or http://HOST:PORT)")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("target %q is not an address (use HOST:PORT or http://HOST:PORT)", s)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}
