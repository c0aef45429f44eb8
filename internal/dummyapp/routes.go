package dummyapp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// RouteSpec is a path with a service time of its own and a contention
// model: a request of the route that starts while n requests of the route
// run (itself included) spends
//
//	Ms                     when n <= Knee (or Knee is 0: no contention)
//	Ms * (n / Knee)^Power  when n > Knee
//
// so the route's throughput n / service time rises up to Knee requests at
// once and falls beyond it when Power > 1 (thrashing: what paper 001 saw
// on heavy pages). The service time is fixed when the request starts, by
// the count running then. In sleep mode this costs no CPU, so a thrashing
// app runs on a small machine. Its flag form is PATH=MS[,knee=K][,power=P]
// (ParseRouteSpec).
type RouteSpec struct {
	Path  string
	Ms    float64
	Knee  int
	Power float64
}

// ParseRouteSpec parses PATH=MS[,knee=K][,power=P]; power defaults to 2.
func ParseRouteSpec(s string) (RouteSpec, error) {
	path, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return RouteSpec{}, fmt.Errorf("route %q: want PATH=MS[,knee=K][,power=P]", s)
	}
	parts := strings.Split(rest, ",")
	ms, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		return RouteSpec{}, fmt.Errorf("route %q: service time %q is not a number of ms", s, parts[0])
	}
	rs := RouteSpec{Path: path, Ms: ms, Power: 2}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "knee":
			if rs.Knee, err = strconv.Atoi(v); err != nil {
				return RouteSpec{}, fmt.Errorf("route %q: knee %q is not a whole number", s, v)
			}
		case "power":
			if rs.Power, err = strconv.ParseFloat(v, 64); err != nil {
				return RouteSpec{}, fmt.Errorf("route %q: power %q is not a number", s, v)
			}
		default:
			return RouteSpec{}, fmt.Errorf("route %q: unknown option %q (want knee=K or power=P)", s, k)
		}
	}
	return rs, rs.validate(math.Inf(1))
}

// String is the form ParseRouteSpec reads.
func (rs RouteSpec) String() string {
	s := rs.Path + "=" + strconv.FormatFloat(rs.Ms, 'g', -1, 64)
	if rs.Knee > 0 {
		s += ",knee=" + strconv.Itoa(rs.Knee) + ",power=" + strconv.FormatFloat(rs.Power, 'g', -1, 64)
	}
	return s
}

func (rs RouteSpec) validate(maxMs float64) error {
	switch {
	case !strings.HasPrefix(rs.Path, "/") || strings.ContainsAny(rs.Path, " \t{}"):
		return fmt.Errorf("route path %q: want an absolute path without spaces or wildcards", rs.Path)
	case rs.Path == "/" || rs.Path == "/work" || strings.HasPrefix(rs.Path, "/work/") || rs.Path == "/stats" ||
		strings.HasPrefix(rs.Path, "/stats/") || rs.Path == "/healthz":
		return fmt.Errorf("route path %q is one of the app's own endpoints", rs.Path)
	case math.IsNaN(rs.Ms) || rs.Ms < 0 || rs.Ms > maxMs:
		return fmt.Errorf("route %s: service time %v ms: want 0 to max-ms", rs.Path, rs.Ms)
	case rs.Knee < 0:
		return fmt.Errorf("route %s: knee %d: want 0 (no contention) or more", rs.Path, rs.Knee)
	case math.IsNaN(rs.Power) || rs.Power < 0 || rs.Power > 10:
		return fmt.Errorf("route %s: power %v: want 0 to 10", rs.Path, rs.Power)
	}
	return nil
}

func (c Config) validateRoutes() error {
	seen := map[string]bool{}
	for _, rs := range c.Routes {
		if err := rs.validate(c.MaxMs); err != nil {
			return err
		}
		if seen[rs.Path] {
			return fmt.Errorf("route path %q given twice", rs.Path)
		}
		seen[rs.Path] = true
	}
	if c.SessionCookie != "" && (&http.Cookie{Name: c.SessionCookie, Value: "x"}).Valid() != nil {
		return fmt.Errorf("session-cookie %q: want a cookie name", c.SessionCookie)
	}
	return nil
}

// appRoute is one RouteSpec's running state.
type appRoute struct {
	spec    RouteSpec
	running atomic.Int64
}

// serviceMs is the contention model: the service time of a request that
// starts while n of the route run, itself included.
func (rs RouteSpec) serviceMs(n int) float64 {
	if rs.Knee <= 0 || n <= rs.Knee {
		return rs.Ms
	}
	return rs.Ms * math.Pow(float64(n)/float64(rs.Knee), rs.Power)
}

// start counts a request of the route in and returns its service time.
func (rt *appRoute) start() float64 {
	return rt.spec.serviceMs(int(rt.running.Add(1)))
}

func (rt *appRoute) finish() { rt.running.Add(-1) }

// addRoutes registers the configured routes on mux.
func (a *App) addRoutes(mux *http.ServeMux) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errors.Join(ErrInvalidConfig, fmt.Errorf("route: %v", v))
		}
	}()
	for _, rs := range a.cfg.Routes {
		rt := &appRoute{spec: rs}
		mux.HandleFunc(rs.Path, func(w http.ResponseWriter, r *http.Request) { a.work(w, r, rs.Ms, rt) })
	}
	return nil
}

// setSession sets the session cookie on the answer to a request that does
// not carry it (with --session-cookie).
func (a *App) setSession(w http.ResponseWriter, r *http.Request) {
	name := a.cfg.SessionCookie
	if name == "" {
		return
	}
	if c, err := r.Cookie(name); err == nil && c.Value != "" {
		return
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	http.SetCookie(w, &http.Cookie{Name: name, Value: hex.EncodeToString(b[:]), Path: "/", HttpOnly: true})
}
