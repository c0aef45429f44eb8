package admission

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contention is dummyapp's model: the throughput of n requests at once of
// a route with service time s ms, knee k and power p.
func contention(n, k int, p, s float64) float64 {
	f := 1.0
	if n > k {
		f = math.Pow(float64(n)/float64(k), p)
	}
	return float64(n) / (s * f / 1000)
}

func TestClimberConvergesToTheKnee(t *testing.T) {
	cases := []struct {
		name        string
		knee, hi    int
		power       float64
		start       int
		wantLo, hi2 int
	}{
		// the bench's heavy page: knee 2, starting at it
		{name: "knee 2 from 2", knee: 2, hi: 16, power: 2, start: 2, wantLo: 1, hi2: 3},
		// climbing up from 1 to a knee of 8
		{name: "knee 8 from 1", knee: 8, hi: 64, power: 2, start: 1, wantLo: 7, hi2: 9},
		// coming down from m to a knee of 4 under mild thrashing
		{name: "knee 4 from 32", knee: 4, hi: 32, power: 1.5, start: 32, wantLo: 3, hi2: 5},
		// m below the knee: the limit stays at m's side
		{name: "m below the knee", knee: 20, hi: 6, power: 2, start: 1, wantLo: 5, hi2: 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := NewClimber(c.start)
			for range 100 {
				cl.Step(contention(cl.Limit(), c.knee, c.power, 100), c.hi)
			}
			for range 30 {
				l := cl.Step(contention(cl.Limit(), c.knee, c.power, 100), c.hi)
				assert.GreaterOrEqual(t, l, c.wantLo)
				assert.LessOrEqual(t, l, c.hi2)
			}
		})
	}
}

func TestClimberStepRules(t *testing.T) {
	cases := []struct {
		name  string
		start int
		tputs []float64
		hi    int
		want  []int
	}{
		// improving throughput keeps climbing
		{name: "keeps direction", start: 1, tputs: []float64{1, 2, 3}, hi: 10, want: []int{2, 3, 4}},
		// a drop reverses, an improvement after keeps the new direction
		{name: "reverses on a drop", start: 3, tputs: []float64{5, 4, 6}, hi: 10, want: []int{4, 3, 2}},
		// equal throughput is not a drop
		{name: "equal keeps", start: 3, tputs: []float64{5, 5}, hi: 10, want: []int{4, 5}},
		// never below 1: turns up there
		{name: "floor", start: 2, tputs: []float64{5, 4, 5, 6, 6}, hi: 10, want: []int{3, 2, 1, 1, 2}},
		// never above hi: turns down there
		{name: "ceiling", start: 2, tputs: []float64{1, 2, 3}, hi: 3, want: []int{3, 3, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := NewClimber(c.start)
			var got []int
			for _, tp := range c.tputs {
				got = append(got, cl.Step(tp, c.hi))
			}
			require.Equal(t, c.want, got)
		})
	}
}

func TestClimberCap(t *testing.T) {
	cl := NewClimber(8)
	cl.Cap(3) // m shrank
	assert.Equal(t, 3, cl.Limit())
	cl.Cap(10) // a cap above never raises it
	assert.Equal(t, 3, cl.Limit())
}
