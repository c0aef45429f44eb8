package dummyapp

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRouteSpec(t *testing.T) {
	cases := []struct {
		in   string
		want RouteSpec
		err  bool
	}{
		// a plain service time, the default power
		{in: "/login=20", want: RouteSpec{Path: "/login", Ms: 20, Power: 2}},
		// knee and power
		{in: "/heavy=100,knee=2,power=3", want: RouteSpec{Path: "/heavy", Ms: 100, Knee: 2, Power: 3}},
		// no '='
		{in: "/login", err: true},
		// not a number
		{in: "/login=fast", err: true},
		// an unknown option
		{in: "/x=1,size=3", err: true},
		// a relative path
		{in: "login=1", err: true},
		// the app's own endpoint
		{in: "/stats=1", err: true},
		// a negative knee
		{in: "/x=1,knee=-1", err: true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseRouteSpec(c.in)
			if c.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			again, err := ParseRouteSpec(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, again, "String is what ParseRouteSpec reads")
		})
	}
}

func TestContentionModel(t *testing.T) {
	rs := RouteSpec{Path: "/heavy", Ms: 100, Knee: 2, Power: 2}
	cases := []struct {
		n    int
		want float64
	}{
		{1, 100}, // below the knee: the base time
		{2, 100}, // at the knee: still the base time
		{4, 400}, // twice the knee, power 2: four times
		{6, 900}, // three times the knee: nine times
	}
	for _, c := range cases {
		assert.InDelta(t, c.want, rs.serviceMs(c.n), 1e-9, "n=%d", c.n)
	}
	// throughput n / service time peaks at the knee
	tput := func(n int) float64 { return float64(n) / rs.serviceMs(n) }
	assert.Greater(t, tput(2), tput(1))
	assert.Greater(t, tput(2), tput(3))
	// no knee: no contention
	assert.Equal(t, 100.0, RouteSpec{Ms: 100}.serviceMs(50))
}

func TestRoutesServeWithContentionAndSessionCookie(t *testing.T) {
	cfg := sleepConfig()
	cfg.SessionCookie = "SID"
	cfg.Routes = []RouteSpec{{Path: "/heavy", Ms: 20, Knee: 1, Power: 2}}
	a, err := New(cfg, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(a)
	defer srv.Close()

	// A first page gets the cookie; a page carrying it does not.
	resp, err := http.Get(srv.URL + "/heavy")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var sid *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "SID" {
			sid = c
		}
	}
	require.NotNil(t, sid)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/heavy", nil)
	req.AddCookie(sid)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Empty(t, resp.Cookies())
	alone, err := strconv.ParseFloat(resp.Header.Get(HeaderServiceMs), 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, alone, 20.0)

}

func TestAppRouteCountsRunningRequests(t *testing.T) {
	rt := &appRoute{spec: RouteSpec{Path: "/heavy", Ms: 20, Knee: 1, Power: 2}}
	// each request's time is fixed by the count running when it starts
	assert.InDelta(t, 20.0, rt.start(), 1e-9)  // alone
	assert.InDelta(t, 80.0, rt.start(), 1e-9)  // 2 running: (2/1)^2
	assert.InDelta(t, 180.0, rt.start(), 1e-9) // 3 running: (3/1)^2
	rt.finish()
	rt.finish()
	assert.InDelta(t, 80.0, rt.start(), 1e-9) // 2 running again
}
