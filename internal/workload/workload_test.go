package workload

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMixedPreset: the mixed workload draws its classes by share, each
// class's size exactly, and its mean is the classes' mean (40 ms).
func TestMixedPreset(t *testing.T) {
	s, err := Lookup("mixed")
	require.NoError(t, err)
	require.NoError(t, s.Validate())
	assert.Equal(t, 40.0, s.MeanServiceMs())
	g, err := NewGenerator(s, 100, 7)
	require.NoError(t, err)
	const n = 200000
	counts := [2]int{}
	sum := 0.0
	for range n {
		a := g.Next()
		require.Equal(t, []float64{10, 310}[a.Class], a.SizeMs)
		counts[a.Class]++
		sum += a.SizeMs
	}
	// 90 % ± 5 standard errors (0.067 %).
	assert.InDelta(t, 0.9, float64(counts[0])/n, 0.0034)
	assert.InDelta(t, 40, sum/n, 0.5)
	// Lookup hands out a copy: changing it changes no preset.
	s.Classes[0].Name = "changed"
	again, _ := Lookup("mixed")
	assert.Equal(t, "light", again.Classes[0].Name)
	assert.Contains(t, again.String(), "90% light 10ms, 10% heavy 310ms; mean 40ms")
}

// TestClassSizes: a class with SD/mean > 0 draws lognormal sizes with the
// class's mean and spread.
func TestClassSizes(t *testing.T) {
	s := Spec{Name: "custom", MeanMs: 20, Burst: 1, Scale: 2, Classes: []Class{{Name: "a", Share: 1, MeanMs: 20, CV: 0.5}}}
	require.NoError(t, s.Validate())
	g, err := NewGenerator(s, 10, 3)
	require.NoError(t, err)
	const n = 200000
	sum, sq := 0.0, 0.0
	for range n {
		a := g.Next()
		assert.Zero(t, a.Class)
		sum += a.SizeMs
		sq += a.SizeMs * a.SizeMs
	}
	mean := sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	assert.InDelta(t, 40, mean, 0.4, "scaled mean")
	assert.InDelta(t, 0.5, sd/mean, 0.02)
}

func TestValidateClasses(t *testing.T) {
	base := func() Spec {
		return Spec{Name: "custom", MeanMs: 40, Burst: 1, Scale: 1, Classes: []Class{{Name: "light", Share: 0.9, MeanMs: 10}, {Name: "heavy", Share: 0.1, MeanMs: 310}}}
	}
	cases := []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"valid", func(*Spec) {}, ""},
		// The name is a path segment of the load generator's requests.
		{"bad name", func(s *Spec) { s.Classes[0].Name = "Light/1" }, "lower-case letters"},
		{"empty name", func(s *Spec) { s.Classes[0].Name = "" }, "lower-case letters"},
		{"twice", func(s *Spec) { s.Classes[1].Name = "light" }, "appears twice"},
		{"zero share", func(s *Spec) { s.Classes[0].Share = 0 }, "share must be in (0, 1]"},
		{"shares not 1", func(s *Spec) { s.Classes[0].Share = 0.8 }, "add up to 1"},
		{"bad mean", func(s *Spec) { s.Classes[1].MeanMs = 0 }, "mean must be a positive"},
		{"bad cv", func(s *Spec) { s.Classes[1].CV = -1 }, "SD/mean must be"},
		// MeanMs must be the classes' mean, so load figures are right.
		{"mean mismatch", func(s *Spec) { s.MeanMs = 41 }, "is not its classes' mean"},
		{"too many", func(s *Spec) {
			s.Classes = nil
			for i := range 65 {
				s.Classes = append(s.Classes, Class{Name: string(rune('a'+i%26)) + string(rune('a'+i/26)), Share: 1.0 / 65, MeanMs: 40})
			}
		}, "at most 64"},
	}
	for _, tc := range cases {
		s := base()
		tc.mod(&s)
		err := s.Validate()
		if tc.want == "" {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.name)
		}
	}
}
