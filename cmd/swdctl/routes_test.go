package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func TestPrintRoutes(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, printRoutes(&b, nil))
	assert.Empty(t, b.String(), "no routes learnt: nothing printed")
	// light is not limited (no per-route admission): "-"; heavy's learnt
	// limit is 3.
	rs := []*swdv1.RouteStat{{Name: "GET /work/light", CostSeconds: 0.0101, Samples: 120}, {Name: "GET /work/heavy", CostSeconds: 0.31, Samples: 12, Limit: 3}}
	require.NoError(t, printRoutes(&b, rs))
	assert.Equal(t, "\nROUTE            COST       SAMPLES  LIMIT\nGET /work/light  10.100ms   120      -\nGET /work/heavy  310.000ms  12       3\n", b.String())
	assert.Equal(t, []routeJSON{{"GET /work/light", 10.1, 120, 0}, {"GET /work/heavy", 310, 12, 3}}, routesJSON(rs))
	assert.Equal(t, []routeJSON{}, routesJSON(nil))
}
